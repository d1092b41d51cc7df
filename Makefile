# taso-py: `make demo` and `make test` work on a fresh machine with only Python 3.10+.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
TASO   := $(VENV)/bin/taso
TORCH  := torch==2.13.0
EXAMPLE := examples/inception_v3_small.onnx

.PHONY: demo test test-slow lint install dev example rules clean

$(PY):
	python3 -m venv $(VENV)

# The package and its runtime dependencies (no torch: the optimizer does not need it).
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install -e .
	touch $@

# Test dependencies; torch is pinned and installed first, or a dependency's unpinned
# torch would pull several GB of CUDA packages.
$(VENV)/.dev-installed: pyproject.toml $(VENV)/.installed
	$(PIP) install "$(TORCH)"
	$(PIP) install -e ".[dev]"
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.dev-installed

demo: install
	@mkdir -p out
	$(TASO) info $(EXAMPLE)
	$(TASO) convert $(EXAMPLE) -o out/inception_v3_small.converted.onnx
	$(TASO) verify-rule "(matmul(x, w1), matmul(x, w2)) == (split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1)])[0], split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1)])[1])"
	$(TASO) verify-rule "relu(add(a, b)) == add(relu(a), relu(b))" || echo "(exit $$?: refuted, as it should be)"
	$(TASO) rules stats
	$(TASO) rules list --op matmul
	$(TASO) rules show r87638e17
	$(TASO) optimize $(EXAMPLE) -o out/inception_v3_small.taso.onnx
	$(TASO) compile out/inception_v3_small.taso.onnx --target cpu --no-optimize -o out/inception_v3_small.cpu
	$(TASO) run out/inception_v3_small.cpu --check --repeat 20

# The default suite on up to 4 workers (a module's tests on one worker, so its fixtures are built
# once): 12:09 on a fresh clone of a 2-core Zen 1, where it took 21:37 in one process. The slow
# tests time models: one at a time.
test: dev
	$(PY) -m pytest -n auto --maxprocesses 4 --dist loadscope

test-slow: dev
	$(PY) -m pytest -m slow

lint: dev
	$(VENV)/bin/ruff check taso_py verifier codegen benchmarks tests

# Regenerate the shipped rule library (seeded: the same rules every time).
rules: install
	$(TASO) generate-rules --max-ops 3 --seed 0 -o rules/default.json

# Regenerate the bundled example (seeded: the bytes do not change).
example: dev
	$(PY) -m benchmarks.models --size small --out out/example inception_v3
	mv out/example/inception_v3.onnx $(EXAMPLE)

clean:
	rm -rf $(VENV) out build *.egg-info .pytest_cache
