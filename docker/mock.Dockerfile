# The mock as an image, listening on 0.0.0.0:8000:
#
#   docker build -f docker/mock.Dockerfile -t acs-mock .
#   docker run --rm -p 8000:8000 acs-mock
#   docker run --rm -p 8000:8000 -e MOCK_KEYS=k1,k2 acs-mock --budget-tokens 100000
#
# Arguments after the image name go to acs-mock (acs-mock --help); every option also
# reads MOCK_<NAME> (mock_server/README.md). tests/test_packaging.py checks this file
# against the package: what it copies, the extra it installs, the command and settings.

# Build the wheel from the checkout (setup.py puts openapi.yaml inside it).
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim
COPY --from=wheel /dist /dist
RUN pip install --no-cache-dir "$(ls /dist/*.whl)[mock]" && rm -rf /dist
# Two gunicorn workers unless told otherwise: the default (one per CPU) would count the host's.
ENV MOCK_HOST=0.0.0.0 MOCK_PORT=8000 MOCK_WORKERS=2
EXPOSE 8000
USER nobody
ENTRYPOINT ["acs-mock"]
