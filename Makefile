# The two commands of the README (make is on every machine of this project).
.PHONY: dev test

# set up and run the main job: dagster dev on the embedded default (http://127.0.0.1:3000)
dev:
	bash scripts/dev.sh

# set up and pass the tests (pytest; what CI runs) over several processes (pytest-xdist, tests handed out as
# processes free up): one more than the cores, since the tests wait on their servers (PostgreSQL, Prometheus,
# Dagster runs) part of the time -- on 2 cores 3 processes took 14:43, 2 took 15:34 -- and at most 4, each may
# start its own PostgreSQL, Prometheus and Alertmanager
TEST_PROCESSES := $(shell n=$$(nproc); echo $$(( n < 3 ? n + 1 : 4 )))

test:
	bash scripts/test.sh -q -n $(TEST_PROCESSES) --dist worksteal
