"""The pandera model every stored table is validated against before it is written: the table catalogue's."""

import pandas as pd


def model_of(table: str):
    from gpu_health.catalog import CATALOG

    return CATALOG[table].model


def validate(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` coerced to and checked against ``table``'s model (lazy: every failure reported at once)."""
    return model_of(table).validate(frame, lazy=True)
