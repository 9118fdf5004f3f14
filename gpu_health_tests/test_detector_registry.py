"""The detector registry (gpu_health.diagnosis.detectors): one ordered list, what each detector reads, the runbooks
derived from the modules, docs/runbooks.md generated from them."""

import dataclasses
import re
import sys
from pathlib import Path

from gpu_health.constants import ALERT_FAMILIES
from gpu_health.diagnosis import runbooks_doc
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detectors import CONTEXT_MACHINERY, DETECTORS, MODULES, RUNBOOKS, needs

FIELDS = [f.name for f in dataclasses.fields(PartitionContext)]
READ = re.compile(r"""\bctx\.([a-z_]+)|getattr\(ctx,\s*["']([a-z_]+)["']""")


def test_every_detector_needs_only_context_fields():
    for d in DETECTORS:
        assert d.needs, d.name
        unknown = set(d.needs) - set(FIELDS)
        assert not unknown, f"{d.name} needs {unknown}: not PartitionContext fields"
        assert not set(d.needs) & CONTEXT_MACHINERY, d.name


def test_needs_is_the_union_in_field_order():
    union = {n for d in DETECTORS for n in d.needs}
    assert set(needs()) == union
    assert list(needs()) == [f for f in FIELDS if f in union]


def _sources(module) -> list[Path]:
    """The module's file and, for a registration of detectors defined elsewhere, those modules' files."""
    out = [Path(module.__file__)]
    for d in module.DETECTORS:
        home = sys.modules[d.run.__module__]
        if getattr(home, d.name, None) is d.run and Path(home.__file__) not in out:
            out.append(Path(home.__file__))
    return out


def test_a_module_declares_every_context_field_its_code_reads():
    """A detector module reading a frame it does not declare would judge on data the steps may not give it."""
    for m in MODULES:
        declared = {n for d in m.DETECTORS for n in d.needs}
        for path in _sources(m):
            read = {a or b for a, b in READ.findall(path.read_text())} & set(FIELDS)
            missing = read - declared - CONTEXT_MACHINERY
            assert not missing, f"{path.name} reads {sorted(missing)} that {m.__name__} does not declare"


def test_the_order_of_the_findings_is_the_registry_order():
    """Alerts that merge findings read the first one: the order is part of the behaviour."""
    assert [d.name for d in DETECTORS] == [
        "detect_hardware", "detect_thermal", "detect_deploys", "detect_slowdowns", "detect_scheduling",
        "detect_no_progress", "detect_stalls", "detect_missing_data", "detect_slo_burn", "detect_platform",
        "detect_convergence", "detect_inventory", "detect_rack_cooling", "detect_rack_power", "detect_change_policy"]


def test_every_alert_family_has_one_runbook_owned_by_one_module():
    owners = {}
    for m in MODULES:
        for family in m.RUNBOOKS:
            owners.setdefault(family, []).append(m.__name__)
    assert set(owners) == set(ALERT_FAMILIES)
    assert all(len(v) == 1 for v in owners.values()), owners
    for family, text in RUNBOOKS.items():
        assert text.endswith(f"Runbook: docs/runbooks.md#{family}"), family
    emitted = {fam for d in DETECTORS for _, fam in d.emits}
    assert emitted <= set(ALERT_FAMILIES), emitted - set(ALERT_FAMILIES)


def test_runbooks_doc_is_generated_from_the_detectors_and_not_stale():
    on_disk = runbooks_doc.DOC_PATH.read_text()
    assert runbooks_doc.render(on_disk) == on_disk, f"docs/runbooks.md is stale: run `{runbooks_doc.REGENERATE}`"
    for family in ALERT_FAMILIES:  # the anchors the alerts link to, each with its generated block
        assert f"## {family}\n{runbooks_doc.BEGIN}" in on_disk, family
    for d in DETECTORS:
        for name, family in d.emits:
            assert f"`{name}`" in runbooks_doc.family_block(family)


def test_every_detector_module_is_registered():
    """A module dropped into diagnosis/detectors/ and not named in MODULE_NAMES would never run."""
    from pathlib import Path

    from gpu_health.diagnosis import detectors

    files = {p.stem for p in Path(detectors.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert files == set(detectors.MODULE_NAMES)
