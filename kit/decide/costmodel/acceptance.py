"""Accept length versus acceptance rate, for a draft of length `k`.

Engines report the *accept length* `E`: tokens emitted per verification step, the bonus token
included, so `1 <= E <= k + 1`. With one per-token acceptance `a` (Leviathan et al. 2022):
`E = (1 - a^(k+1)) / (1 - a)`; with per-position acceptance `a_i`:
`E = 1 + sum_{i<=k} prod_{j<=i} a_j`. Out-of-range input raises `CostModelError`; nothing is clamped.
"""

from __future__ import annotations

from collections.abc import Mapping

from kit.errors import CostModelError

DEFAULT_ACCEPTANCE = 0.75
"""Per-token acceptance assumed when nothing is known: between the published Qwen3.x-27B MTP
figures with thinking off (a ~ 0.86) and on (a ~ 0.69) (SemiAnalysis InferenceX, H200)."""


def _check_rate(a: float, what: str = "acceptance") -> None:
    if not 0 < a < 1:
        raise CostModelError(f"{what} must be strictly between 0 and 1, got {a}")


def _check_k(k: int) -> None:
    if k < 1:
        raise CostModelError(f"draft length k must be >= 1, got {k}")


def check_accept_length(E: float, k: int) -> None:
    """Raise unless 1 <= E <= k + 1 (what an engine can report for draft length k)."""
    _check_k(k)
    if not 1 <= E <= k + 1:
        raise CostModelError(
            f"accept length {E} is impossible for k={k}: it counts the bonus token, "
            f"so it lies in [1, {k + 1}]"
        )


def accept_length(a: float, k: int) -> float:
    """Expected tokens per verification step: (1 - a^(k+1)) / (1 - a)."""
    _check_rate(a)
    _check_k(k)
    return (1 - a ** (k + 1)) / (1 - a)


def acceptance_rate(E: float, k: int) -> float:
    """The per-token acceptance `a` whose accept length at draft length k is E (bisection)."""
    check_accept_length(E, k)
    if E in (1, k + 1):
        raise CostModelError(
            f"accept length {E} at k={k} means acceptance {'0' if E == 1 else '1'}: "
            f"no rate in (0, 1) gives it"
        )
    lo, hi = 1e-12, 1 - 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if accept_length(mid, k) < E else (lo, mid)
    return (lo + hi) / 2


def accept_length_for(k: int, known: Mapping[int, float] | None = None) -> tuple[float, str]:
    """Accept length to expect at draft length k, and where it comes from.

    A measured or configured value for k is used as is; otherwise the acceptance rate of the
    nearest known k is carried over; with nothing known, `DEFAULT_ACCEPTANCE`.
    """
    _check_k(k)
    known = dict(known or {})
    for kk, E in known.items():
        check_accept_length(E, kk)
    if k in known:
        return known[k], f"accept length {known[k]:.2f} at k={k} (given)"
    if known:
        near = min(known, key=lambda kk: (abs(kk - k), kk))
        a = acceptance_rate(known[near], near)
        return accept_length(
            a, k
        ), f"acceptance {a:.2f} carried over from accept length {known[near]:.2f} at k={near}"
    return accept_length(
        DEFAULT_ACCEPTANCE, k
    ), f"assumed acceptance {DEFAULT_ACCEPTANCE} (no accept length known)"
