"""The mock's Flask app as a module-level WSGI callable, for servers that import one (bench.stacks
runs it under uWSGI's gevent loop): its answers and pacing are the mock's, but none of
api_server/serve.py's gunicorn worker comes with it (the body-read timeout, the early errors in
the API's words, prometheus's multiprocess directory), so it is a measurement, not a deployment.
"""

from mock_server import create_app

app = create_app()
