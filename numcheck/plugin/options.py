"""numcheck's command-line options and ini keys, by name: one module the plugin and the
session both import (every flag ``--numcheck-*``, every ini key ``numcheck_*``)."""

from __future__ import annotations

OPTION = "--numcheck"
REGEN_OPTION = "--numcheck-regen"
DEVICE_OPTION = "--numcheck-device"
PERF_OPTION = "--numcheck-perf"
EXPLAIN_OPTION = "--numcheck-explain"
REPORT_OPTION = "--numcheck-report"
MARKDOWN_OPTION = "--numcheck-markdown"
BASELINE_OPTION = "--numcheck-baseline"
PRUNE_OPTION = "--numcheck-prune"
HTML_OPTION = "--numcheck-html"
OBTAINED_OPTION = "--numcheck-obtained"
#: Keep the run's report in the history folder (numcheck/history/store.py).
SAVE_OPTION = "--numcheck-save"
SAVE_DIR_OPTION = "--numcheck-save-dir"
DEVICE_INI = "numcheck_device"
CASES_INI = "numcheck_cases"
GOLDENS_INI = "numcheck_goldens"
DRIFT_INI = "numcheck_drift_rules"
#: GPU models (device classes) case files may key settings by, beside numcheck's list.
GPU_MODELS_INI = "numcheck_gpu_models"
FIRST_CALL_INI = "numcheck_first_call_note_s"
#: Where checks run (numcheck/execute/isolated.py): a worker process (``process``), or the
#: pytest process (``off``); the ini key, then the environment variable, set the default.
ISOLATE_OPTION = "--numcheck-isolate"
ISOLATE_INI = "numcheck_isolate"
ISOLATE_ENV = "NUMCHECK_ISOLATE"
ISOLATE_MODES = ("process", "off")
#: How many worker processes run the checks: a number, or ``auto`` (one per core on the CPU,
#: one on a GPU or in a timing run); the ini key, then the environment variable, set the default.
WORKERS_OPTION = "--numcheck-workers"
WORKERS_INI = "numcheck_workers"
WORKERS_ENV = "NUMCHECK_WORKERS"
#: A check's time limit in seconds, and its first call's (compile, warm-up); 0: none.
TIMEOUT_OPTION = "--numcheck-timeout"
TIMEOUT_INI = "numcheck_timeout"
TIMEOUT_FIRST_CALL_OPTION = "--numcheck-timeout-first-call"
TIMEOUT_FIRST_CALL_INI = "numcheck_timeout_first_call"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_TIMEOUT_FIRST_CALL_S = 900.0
#: Run the checks under compute-sanitizer (numcheck/execute/sanitizer.py).
SANITIZE_OPTION = "--numcheck-sanitize"
DEVICES = ("auto", "cpu", "cuda")
#: The calibration mode (plugin/calibration.py): measure and suggest instead of gating.
CALIBRATE_OPTION = "--numcheck-calibrate"
CALIBRATE_WRITE_OPTION = "--numcheck-calibrate-write"
CALIBRATE_POOL_OPTION = "--numcheck-calibrate-pool"
CALIBRATE_FIRST_SEED_OPTION = "--numcheck-calibrate-first-seed"
CALIBRATE_SPEED_OPTION = "--numcheck-calibrate-speed"
CALIBRATE_MARGIN_OPTION = "--numcheck-calibrate-margin"
CALIBRATE_JSON_OPTION = "--numcheck-calibrate-json"
CALIBRATE_WITH_OPTION = "--numcheck-calibrate-with"
#: Write tables although the named variants look like bugs (recorded in the case file).
CALIBRATE_ACCEPT_OPTION = "--numcheck-calibrate-accept"
#: Set the selected tables from this run alone, whatever their calibration records say.
CALIBRATE_RENEW_OPTION = "--numcheck-calibrate-renew"
#: The option group: every option in it that takes a value is protected from pytest's
#: rootdir determination (numcheck/plugin/rootdir_repair.py).
GROUP = "numcheck"
