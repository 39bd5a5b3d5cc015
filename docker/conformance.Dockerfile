# The conformance suite as an image, for a CI that runs containers:
#
#   docker build -f docker/conformance.Dockerfile -t acs-conformance .
#   docker run --rm -e CONFORMANCE_BASE_URL=https://your.deployment -e CONFORMANCE_API_KEY \
#       -v "$PWD/reports:/reports" acs-conformance --profile full --junit /reports/conformance.xml
#
# Arguments after the image name go to acs-conformance (acs-conformance --help); the exit
# code is the suite's (0 conformant, 1 a check failed, 2 usage or unreachable).
# tests/test_packaging.py checks this file against the package.

# Build the wheel from the checkout (setup.py puts openapi.yaml inside it).
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# Only the [conformance] extra: no Flask, no server.
FROM python:3.11-slim
COPY --from=wheel /dist /dist
RUN pip install --no-cache-dir "$(ls /dist/*.whl)[conformance]" && rm -rf /dist
# Reports go to a mounted directory; the user stays root so that it can write there.
WORKDIR /reports
ENTRYPOINT ["acs-conformance"]
