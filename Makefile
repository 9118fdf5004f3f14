# The two commands of the README (make is on every machine of this project).
.PHONY: dev test

# set up and run the main job: dagster dev on the embedded default (http://127.0.0.1:3000)
dev:
	bash scripts/dev.sh

# set up and pass the tests (pytest; what CI runs) over several processes (pytest-xdist, tests handed out as
# processes free up): one per core, at most 4 (each may start its own PostgreSQL, Prometheus and Alertmanager).
# On 2 cores, one after another on 2026-12-03: 2 processes 12:08 and 12:59, 3 processes 14:31, 14:03 and 14:36 (CPU
# 1,364 and 1,454 s against 1,554-1,647: a third process on 2 cores cost more CPU than its waits on the servers
# gave back; 2026-12-01's smaller suite had measured the other way, 14:43 against 15:34)
TEST_PROCESSES := $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))

test:
	bash scripts/test.sh -q -n $(TEST_PROCESSES) --dist worksteal
