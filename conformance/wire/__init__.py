"""What crosses the wire and how it is read: the HTTP client (client.py) and raw sockets
(rawhttp.py), the gate's own token meter (meter.py), who answered a reply (who_answered.py),
and the parsers of what comes back (sse.py: event streams, tensors.py: activations,
volatile.py: the fields two answers may differ in). No check and no report lives here."""
