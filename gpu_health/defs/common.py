"""Conventions shared by every asset: kinds, owners, column schemas, the contract check factory."""

import dagster as dg
import pandas as pd
import pandera.pandas as pa

KINDS = {"pandas", "pandera", "sql"}
OWNERS = {"infra": ["team:infra"], "ml_platform": ["team:ml-platform"], "finance": ["team:finance"]}
MAX_CHECK_EXAMPLES = 20
ERROR_REJECT_SHARE = 0.05  # above this share of rejected rows, downstream numbers would be wrong


def column_schema(model: type[pa.DataFrameModel]) -> dg.TableSchema:
    schema = model.to_schema()
    return dg.TableSchema(columns=[
        dg.TableColumn(name, str(col.dtype), description=col.description or "",
                       constraints=dg.TableColumnConstraints(nullable=bool(col.nullable)))
        for name, col in schema.columns.items()
    ])


def preview(frame: pd.DataFrame, rows: int = 5) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.head(rows).to_markdown(index=False) if len(frame) else "(no rows)")


def contract_check_spec(asset_name: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        name=f"{asset_name}_contract", asset=asset_name, blocking=True,
        description=f"Rows of {asset_name} that break the pandera contract are quarantined; "
                    f"ERROR (blocks downstream) above {ERROR_REJECT_SHARE:.0%} rejected, WARN below.",
    )


def contract_check_result(asset_name: str, accepted: int, rejects: pd.DataFrame) -> dg.AssetCheckResult:
    """One result per materialization: counts by reason and at most 20 example rows."""
    n_rej = int(rejects["row_index"].nunique()) if len(rejects) else 0
    total = accepted + n_rej
    share = n_rej / total if total else 0.0
    by_reason = rejects.groupby("reason")["row_index"].nunique().sort_values(ascending=False).to_dict() if n_rej else {}
    examples = rejects.drop_duplicates("row_index").head(MAX_CHECK_EXAMPLES)[["origin", "row_index", "column", "value", "reason"]] if n_rej else rejects
    return dg.AssetCheckResult(
        check_name=f"{asset_name}_contract", asset_key=asset_name, passed=n_rej == 0,
        severity=dg.AssetCheckSeverity.ERROR if share > ERROR_REJECT_SHARE else dg.AssetCheckSeverity.WARN,
        metadata={"accepted_rows": accepted, "rejected_rows": n_rej, "rejected_share": round(share, 6),
                  "rejects_by_reason": dg.MetadataValue.json({str(k): int(v) for k, v in by_reason.items()}),
                  "examples": preview(examples, MAX_CHECK_EXAMPLES)},
    )
