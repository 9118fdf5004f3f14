# The two commands of the README (make is on every machine of this project).
.PHONY: dev test

# set up and run the main job: dagster dev on the embedded default (http://127.0.0.1:3000)
dev:
	bash scripts/dev.sh

# set up and pass the tests (pytest; what CI runs) over several processes (pytest-xdist, tests handed out as
# processes free up): one per core, at most 4 (each may start its own PostgreSQL, Prometheus and Alertmanager): a
# process more than the cores costs more CPU than its waits on the servers give back (docs/benchmarks.md).
TEST_PROCESSES := $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))

test:
	bash scripts/test.sh -q -n $(TEST_PROCESSES) --dist worksteal
