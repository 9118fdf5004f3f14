"""Shared constants are defined once (gpu_health/constants.py) and every module uses that definition."""

import ast
import re
import tokenize
from pathlib import Path

import pandas as pd

import gpu_health
from gpu_health import constants as C
from gpu_health.metrics import device, goodput

ROOT = Path(gpu_health.__file__).resolve().parent

# A partition-width literal: the 5-minute Timedelta, its frequency string or its cron schedule.
PARTITION_LITERAL = re.compile(r'Timedelta\(\s*minutes\s*=\s*5\s*\)|Timedelta\(\s*"5\s*min"\s*\)|"5min"|"5T"|"\*/5 \* \* \* \*"'
                               r'|//\s*5\b|\b5\s*\*\s*60\s*\*\s*10\s*\*\*\s*9')
# A line that holds a 5-minute span which is not the partition says so.
NOT_THE_PARTITION = "# not the partition"

def _literal_lines() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "constants.py":
            continue
        hits = [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                if PARTITION_LITERAL.search(line) and NOT_THE_PARTITION not in line]
        if hits:
            out[rel] = hits
    return out


def test_partition_constants_agree():
    assert C.PARTITION == pd.Timedelta(C.PARTITION_FREQ) == pd.Timedelta(minutes=5)
    assert pd.Timestamp("2026-11-03T14:07:31Z").floor(C.PARTITION_FREQ) == pd.Timestamp("2026-11-03T14:05Z")
    assert C.PARTITION_CRON.startswith(f"*/{int(C.PARTITION / C.MINUTE)} ")


def test_partition_width_is_written_once():
    found = _literal_lines()
    assert not found, ("use gpu_health.constants (PARTITION, PARTITION_FREQ, PARTITION_CRON) instead of a 5-minute "
                     "literal, or mark a span that is not the partition with '# not the partition: why':\n"
                     + "\n".join(h for hits in found.values() for h in hits))


def test_fatal_xids_are_one_set():
    assert goodput.XID_GPU_FAULT is C.FATAL_XIDS is C.XID_GPU_FAULT
    # the three codes two copies of this set once disagreed on: a contained ECC error (94) leaves the GPU usable;
    # GSP timeouts and errors (119, 120) follow driver and firmware bugs -- neither is a GPU fault
    assert not {94, 119, 120} & C.FATAL_XIDS
    assert 94 in C.XID_MEMORY_WARNING and {119, 120} <= C.XID_SOFTWARE_RESET
    assert C.RESET_XIDS == C.FATAL_XIDS | C.XID_SOFTWARE_RESET


def test_busy_thresholds_have_a_name_each():
    # the loss tree's 'a kernel ran' bar and the device module's 'reported busy' bar are different facts
    assert C.KERNEL_ACTIVE_UTIL_PCT < C.REPORTED_BUSY_UTIL_PCT
    for module in (goodput, device):
        assert not hasattr(module, "BUSY_UTIL_PCT"), f"{module.__name__}: one name for two thresholds"


def _module_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def test_shared_facts_are_defined_once():
    """No module assigns a name of its own to a fact constants.py holds (a copy drifts: the slowdown temperature,
    the clock-event bits, the partition width's forms, the Xid classes, owners, severities)."""
    facts = {n for n in _module_level_names(ROOT / "constants.py") if n.isupper()}
    copies = {path.relative_to(ROOT).as_posix(): sorted(_module_level_names(path) & facts)
              for path in sorted(ROOT.rglob("*.py")) if path.name != "constants.py"}
    copies = {f: names for f, names in copies.items() if names}
    assert not copies, f"import these from gpu_health.constants instead: {copies}"


def _code_lines(path: Path) -> dict[int, str]:
    """Each line's code without its strings and comments (a description may quote a bit mask; code may not)."""
    out: dict[int, str] = {}
    with path.open(encoding="utf-8") as f:
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type not in (tokenize.STRING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                out[tok.start[0]] = out.get(tok.start[0], "") + " " + tok.string
    return out


def test_device_literals_are_written_once():
    """The clock-event bit masks and the slowdown temperature appear as numbers only in constants.py."""
    literal = re.compile(r"0x20 \| 0x40|0x4 \| 0x80|0x8 \| 0x20|\b83(\.0)?\b")
    hits = [f"{path.relative_to(ROOT)}:{n}: {line}" for path in sorted(ROOT.rglob("*.py"))
            if path.name != "constants.py" for n, line in _code_lines(path).items() if literal.search(line)]
    assert not hits, hits


def test_cause_families_are_one_enum():
    from gpu_health.diagnosis.decompose import BASE_FAMILY, FAMILIES
    from gpu_health.diagnosis.detectors import RUNBOOKS

    every = {f.value for f in C.CauseFamily}
    assert set(FAMILIES) == set(C.LOSS_FAMILIES) <= every
    assert set(BASE_FAMILY.values()) <= set(C.LOSS_FAMILIES)
    # finance's families are the alerts' vocabulary: every state's family a CauseFamily, productive aside (no cause)
    assert set(C.STATE_FAMILY.values()) - {C.PRODUCTIVE} <= every and set(C.SPEND_FAMILIES) == every | {C.PRODUCTIVE}
    assert C.CauseFamily.CHECKPOINT.value not in C.ALERT_FAMILIES  # an overhead of saving state, never an alert
    assert set(RUNBOOKS) == set(C.ALERT_FAMILIES), "every alert family has a runbook, and only those"
    assert set(C.SEVERITY_RANK) == set(C.SEVERITIES) == {s.value for s in C.Severity}
    assert set(C.OWNERS) == {o.value for o in C.Owner}


def test_day_chunks_cut_at_midnights_and_every_length_after_them():
    """A range's pieces: UTC days, each cut again every ``length`` after its midnight (not after the range's start,
    so two runs of a day cut it alike)."""
    from gpu_health.constants import day_chunks

    t = pd.Timestamp("2026-11-03T09:10:00Z")
    end = pd.Timestamp("2026-11-04T13:00:00Z")
    days = list(day_chunks(t, end))
    assert days == [(t, pd.Timestamp("2026-11-04T00:00:00Z")), (pd.Timestamp("2026-11-04T00:00:00Z"), end)]
    halves = list(day_chunks(t, end, pd.Timedelta(hours=12)))
    cuts = ["2026-11-03T09:10", "2026-11-03T12:00", "2026-11-04T00:00", "2026-11-04T12:00", "2026-11-04T13:00"]
    assert halves == [(pd.Timestamp(a, tz="UTC"), pd.Timestamp(b, tz="UTC")) for a, b in zip(cuts, cuts[1:])]
    assert [b - a for a, b in day_chunks(t, t + pd.Timedelta(hours=1), pd.Timedelta(minutes=25))] == \
        [pd.Timedelta(minutes=m) for m in (25, 25, 10)]  # 09:10 is 22 x 25 min after midnight: 09:35, 10:00, 10:10
