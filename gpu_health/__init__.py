"""gpu_health: the GPU cluster's telemetry as a Dagster asset pipeline (README).

pandas runs in Copy-on-Write mode in every process that imports the package (the CLI, the bulk path's stage
processes, the Dagster code location, the tests): a column selection, a ``reset_index`` or a slice shares its
parent's arrays until one of them is written to, where pandas 2's default copies them at once -- the default of
pandas 3. It saves the copies, and lets the run cache hand out shallow copies (storage.warehouse._rows_between)
that no caller can write through (``bench/compare.py`` compares the tables and the CPU of two checkouts). What it
changes for code: an
array taken out of a frame (``to_numpy()``, ``.values``) is read-only unless copied (``to_numpy(copy=True)``), and
writing into a frame never writes into another one it was taken from.
"""

import pandas as _pd

_pd.set_option("mode.copy_on_write", True)
