"""The pandera model every stored table is validated against before it is written."""

import pandas as pd


def model_of(table: str):
    import gpu_health.metrics  # noqa: F401  (registers the derived tables' models)
    from gpu_health.contracts import CONTRACTS
    from gpu_health.storage.schema import DERIVED_MODELS

    if table in DERIVED_MODELS:
        return DERIVED_MODELS[table][0]
    return CONTRACTS[table]


def validate(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` coerced to and checked against ``table``'s model (lazy: every failure reported at once)."""
    return model_of(table).validate(frame, lazy=True)
