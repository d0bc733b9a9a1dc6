# pytester drives numcheck's plugin tests in throwaway folders (tests/test_plugin_*.py).
pytest_plugins = ["pytester"]
