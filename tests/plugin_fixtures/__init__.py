"""Small plugins the daemon loads by import path (``--plugin NAME=plugin_fixtures.MODULE``) in
tests/test_daemon_plugins.py; the tests put this folder's parent on the daemon's PYTHONPATH."""
