"""Retries of a step that failed on a transient error (the database gone, the network reset): the policy and the
decorator every asset body and the warehouse IO manager use. Below ``defs.common`` and ``defs.resources``, which
both need it."""

import contextlib
import functools
import inspect

import dagster as dg

# Retries of a step that failed on a transient error (gpu_health.faults: the database gone, the
# network reset): 3 more attempts after 5, 15, 35 s (Dagster's exponential backoff, delay x (2^n - 1);
# +-jitter, so racing steps do not return together). About a minute covers a database restart or a
# fail-over; a longer outage fails the run, and the 5-minute sensor requests the partition again
# after 1, 2 and 4 minutes.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


def _attempt(context) -> int:
    """Retries already made of this step (0 on its first attempt)."""
    number = getattr(context, "retry_number", None)
    if number is None:
        step = getattr(context, "step_context", None) if getattr(context, "has_step_context", True) else None
        number = getattr(step, "previous_attempt_count", 0) if step is not None else 0
    return int(number or 0)


def transient_retry(context, exc: BaseException) -> dg.RetryRequested | None:
    """The retry request for ``exc`` when it is transient and retries remain, else None."""
    from gpu_health.faults import is_transient

    if not is_transient(exc):
        return None
    attempt = _attempt(context) + 1
    return dg.RetryRequested(max_retries=TRANSIENT_RETRY.max_retries,
                             seconds_to_wait=TRANSIENT_RETRY.calculate_delay(attempt))


def retry_transient_errors(fn):
    """Decorate an asset body: a transient error retries the step under ``TRANSIENT_RETRY``.

    Only transient errors (``gpu_health.faults.is_transient``) are retried: bad input or a bug
    fails at once, with its own exception, because a retry would fail the same way. The step
    re-runs whole, which is safe because every write replaces its window. ``fn``'s first
    argument is the asset's context; its signature and generator-ness are kept for Dagster.
    """
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen_wrapper(context, *args, **kwargs):
            with retry_transient(context):
                yield from fn(context, *args, **kwargs)
        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(context, *args, **kwargs):
        with retry_transient(context):
            return fn(context, *args, **kwargs)
    return wrapper


@contextlib.contextmanager
def retry_transient(context):
    """Around a step's work (both wrappers above, the warehouse IO manager's reads and writes): a transient error
    becomes the step's retry request (chained to it); any other exception passes unchanged."""
    try:
        yield
    except Exception as exc:
        retry = transient_retry(context, exc)
        if retry is None:
            raise
        raise retry from exc
