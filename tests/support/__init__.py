"""What the rooms' tests stand on: servers started as a user starts them (mock.py, reference.py,
redis_server.py, nginx.py, upstream.py), an app served in-process (wsgi.py), the suite run
against a URL (suite.py), and small readers (contract.py, metrics.py). Broken servers live in
gallery/, not here."""
