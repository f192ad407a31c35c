# Everything runs in a local virtual environment made from python3.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: quickstart test lint clean

$(BIN)/bench: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: this version resolves to the CPU build on CI machines
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# trains into runs/quickstart (the committed results under leaderboards/quickstart stay as they are)
quickstart: $(BIN)/bench
	$(BIN)/bench sweep leaderboards/quickstart.yaml --out runs/quickstart --executor processes --workers 2

lint: $(BIN)/bench
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
