"""Counter-based randomness: a value is a pure function of its coordinates.

The simulator must give identical rows for a partition whether it is generated
alone or after others (partition independence), so it never carries a random
stream from one window to the next. Every draw is ``uniform(seed, *coords)``:
SplitMix64 finalisation over a mix of the integer coordinates, vectorized in
numpy unsigned 64-bit arithmetic (wrap-around is the point).
"""

import numpy as np
from scipy.special import ndtri

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TO_UNIT = 1.0 / 18446744073709551616.0  # 2**-64


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def hash64(seed: int, *coords) -> np.ndarray:
    """64-bit hash of (seed, coords...), broadcasting array coordinates."""
    with np.errstate(over="ignore"):
        h = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN
        h = _mix(np.asarray(h, dtype=np.uint64))
        for c in coords:
            c = np.asarray(c).astype(np.int64).astype(np.uint64)
            h = _mix(h ^ (c + _GOLDEN + (h << np.uint64(6)) + (h >> np.uint64(2))))
        return h


def uniform(seed: int, *coords) -> np.ndarray:
    """Uniform in the open interval (0, 1)."""
    h = hash64(seed, *coords)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def normal(seed: int, *coords) -> np.ndarray:
    return ndtri(uniform(seed, *coords))


def exponential(seed: int, *coords) -> np.ndarray:
    return -np.log(uniform(seed, *coords))


def lognormal(seed: int, median, sigma, *coords) -> np.ndarray:
    return np.asarray(median) * np.exp(np.asarray(sigma) * normal(seed, *coords))


def choice(seed: int, weights, *coords) -> np.ndarray:
    """Index drawn with the given (unnormalised) weights."""
    cum = np.cumsum(np.asarray(weights, dtype=float))
    return np.searchsorted(cum / cum[-1], uniform(seed, *coords), side="right").clip(0, len(cum) - 1)


def stable_id(text: str) -> int:
    """A 62-bit integer for a string (stable across processes, unlike hash())."""
    h = 1469598103934665603
    for ch in text.encode():
        h = ((h ^ ch) * 1099511628211) & 0x3FFFFFFFFFFFFFFF
    return h
