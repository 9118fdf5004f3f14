"""gpu_health: the GPU cluster's telemetry as a Dagster asset pipeline (README).

pandas runs in Copy-on-Write mode in every process that imports the package (the CLI, the bulk path's stage
processes, the Dagster code location, the tests): a column selection, a ``reset_index`` or a slice shares its
parent's arrays until one of them is written to, where pandas 2's default copies them at once -- the default of
pandas 3. Measured, three days of the bulk path at 1,200 GPUs (bench/compare.py): 1.9 % less CPU for the mode
alone, 3.8-5.5 % with the run cache handing out shallow copies (storage.warehouse._rows_between), every table equal;
pandas' "warn" mode over 16 hours of it reported no write that would change meaning. What it changes for code: an
array taken out of a frame (``to_numpy()``, ``.values``) is read-only unless copied (``to_numpy(copy=True)``), and
writing into a frame never writes into another one it was taken from.
"""

import pandas as _pd

_pd.set_option("mode.copy_on_write", True)
