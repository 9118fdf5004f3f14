"""Metric logic (pure pandas): the loss tree, baselines, KPIs, finance.

The tables these modules compute are declared in :mod:`gpu_health.catalog`,
which the warehouse schema derives from; importing this package registers
nothing.
"""
