"""Generate ``docs/kpis.md`` from the KPI catalog (the catalog is the only source).

Run ``python -m gpu_health.metrics.kpi_docs`` to rewrite the file; a test fails
when the file in the repository is stale.
"""

import sys
from pathlib import Path

from gpu_health.constants import REPORTED_BUSY_UTIL_PCT
from gpu_health.metrics import device as D
from gpu_health.metrics import kpis as K
from gpu_health.metrics import slo_catalog as SLO
from gpu_health.metrics.kpi_catalog import CATALOG, LAYERS, NORTH_STAR, SUPPORTING, Kpi

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "kpis.md"
REGENERATE = "python -m gpu_health.metrics.kpi_docs"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(items) -> str:
    return ", ".join(f"`{i}`" for i in items) if items else "none"


def _section(k: Kpi, level: str = "###") -> list[str]:
    lines = [
        f"{level} `{k.name}` — {k.title}",
        "",
        k.definition,
        "",
        f"- **Formula:** {k.formula}.",
        f"- **Unit:** {k.unit}. **Sliced by:** {_code(k.dimensions)} (other dimension columns are `*`).",
        f"- **Series:** {_code(k.series())}." if k.tier != "north_star" else
        "- **Tables:** `cluster_goodput` (5-minute), `cluster_goodput_daily` (settled).",
        f"- **Owner: {k.owner}.** {k.owner_rationale}",
        f"- **{k.kind.capitalize()}, alert intent: {k.alert_intent}.** {k.intent_rationale}",
        f"- **Guards against:** {k.guards_against}",
        f"- **Needs (optional inputs):** {_code(k.needs)}.",
        f"- **Degrades:** {k.degraded_when}",
    ]
    if k.components:
        lines += ["", "| component | unit | what it counts | needs |", "|---|---|---|---|"]
        lines += [f"| `{c.name}` | {c.unit} | {_cell(c.definition)} | {_code(c.needs)} |" for c in k.components]
    return lines + [""]


def _table(kpis) -> list[str]:
    """One row per KPI: owner, leading / lagging and alert intent first, the brief's three questions."""
    lines = ["| KPI | owner | leading / lagging | alert | unit | sliced by | series |", "|---|---|---|---|---|---|---|"]
    return lines + [f"| `{k.name}` {k.title} | {k.owner} | {k.kind} | {k.alert_intent} | {k.unit} | "
                    f"{', '.join(k.dimensions)} | {len(k.series())} |" for k in kpis]


def _layers() -> list[str]:
    """The layer indicators, a table per layer, then serving's (its SLOs, docs/slos.md)."""
    lines = ["## Layer indicators", "",
             "Beside the supporting KPIs, not among them: each explains its own layer rather than goodput's moves. "
             "The facility and inventory indicators are `kpi_values` series like the supporting KPIs'; serving's are "
             "its SLOs.", ""]
    for layer, title in LAYERS.items():
        lines += [f"### {title}", "", *_table([k for k in CATALOG if k.layer == layer]), ""]
    lines += ["### Serving: SLIs and SLOs", "",
              "Per region x model x version in `serving_slis` (requests, errors, error rate, p50 / p95 / p99 latency, "
              "p99 time to first token), judged by the SLOs of `gpu_health/metrics/slo_catalog.py` over "
              f"{SLO.WINDOW_DAYS} days (`slo_error_budgets`; details: `docs/slos.md`).", "",
              "| SLO | objective | owner | alert |", "|---|---|---|---|"]
    lines += [f"| `{s.name}` {s.title} | {s.objective:.1%} | {s.owner} | {s.alert_intent} |" for s in SLO.CATALOG]
    return lines + [""]


def render_kpi_docs() -> str:
    """The Markdown of docs/kpis.md: the brief's answer first (the north star and its supporting KPIs), the layers'
    indicators after, then how to read ``kpi_values`` and each KPI in detail."""
    lines = [
        "# KPIs: the north star and its supporting KPIs",
        "",
        f"<!-- Generated from gpu_health/metrics/kpi_catalog.py by `{REGENERATE}`; do not edit by hand. -->",
        "",
        "The north star is cluster goodput (productive / paid GPU-minutes, the loss tree of "
        "`gpu_health/metrics/goodput/`). "
        f"{len(SUPPORTING)} supporting KPIs explain its moves, route them to an owner and keep it from being gamed. "
        "The facility's, the inventory's and serving's indicators follow as layers of their own. "
        "`gpu_health.metrics.kpis.compute_kpis` writes the supporting and layer KPIs to the `kpi_values` table: one "
        "row per series x dimension slice x 5-minute partition, with `value`, the additive `numerator` and "
        "`denominator`, the `unit` and a `status`.",
        "",
        "## The north star",
        "",
        *_table([NORTH_STAR])[:2],
        f"| `{NORTH_STAR.name}` {NORTH_STAR.title} | {NORTH_STAR.owner} | {NORTH_STAR.kind} | "
        f"{NORTH_STAR.alert_intent} | {NORTH_STAR.unit} | {', '.join(NORTH_STAR.dimensions)} | "
        "`cluster_goodput`, `cluster_goodput_daily` |",
        "",
        *_section(NORTH_STAR)[2:],
        f"## The {len(SUPPORTING)} supporting KPIs",
        "",
        *_table(SUPPORTING),
        "",
        *_layers(),
        "## Reading `kpi_values`",
        "",
        "- `status` is `ok`, `degraded` or `no_data`. `no_data`: the slice had nothing to measure in the "
        "partition (no rows, or a zero denominator). `degraded`: it had, but under "
        f"{K.MIN_COVERAGE:.0%} of the observations report an optional field or input the series needs "
        "(listed per KPI below). `value` is NaN unless `status` is `ok`: a missing reading is never a zero.",
        "- A KPI split by cause emits one series per component, `<kpi>.<component>`; where the components add "
        "up, the KPI's total is emitted under its bare name too.",
        "- Only the finest slice is stored. A roll-up of a ratio series is the sum of its numerators over the "
        "sum of its denominators; quantile series (`queue_wait_p95`) cannot be rolled up and carry the number "
        "of waits as `denominator`.",
        "- Jobs whose metadata never arrived count under `unknown` (team, workload class), never dropped.",
        f"- Thresholds used in the definitions: busy = `gpu_util_pct` >= {REPORTED_BUSY_UTIL_PCT:g}; device idle = "
        f"`sm_active` < {D.IDLE_SM:g} and, where reported, `tensor_active` < {D.IDLE_TENSOR:g} "
        f"(`gpu_health/metrics/device.py`); low power = under "
        f"{D.LOW_POWER_SHARE:g} x the p{D.REF_POWER_QUANTILE * 100:g} power of the SKU's working GPUs in the "
        "partition; blocked = pending "
        f"for at least {int(K.PENDING_GRACE.total_seconds() // 60)} minutes.",
        "",
        "## The supporting KPIs in detail",
        "",
    ]
    for k in SUPPORTING:
        lines += _section(k)
    lines += ["## The layer indicators in detail", ""]
    for k in CATALOG:
        if k.tier == "layer":
            lines += _section(k)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    DOC_PATH.parent.mkdir(parents=True, exist_ok=True)
    DOC_PATH.write_text(render_kpi_docs())
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
