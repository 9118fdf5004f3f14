# The two commands of the README (make is on every machine of this project).
.PHONY: dev test

# set up and run the main job: dagster dev on the embedded default (http://127.0.0.1:3000)
dev:
	bash scripts/dev.sh

# set up and pass the tests (pytest; what CI runs), a test file at a time per core (pytest-xdist; up to 4
# processes: each may start its own PostgreSQL, Prometheus and Alertmanager)
test:
	bash scripts/test.sh -q -n auto --maxprocesses 4 --dist loadfile
