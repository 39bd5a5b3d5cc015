"""Record and replay: the recording proxy and the replayer (cassette.py), a cassette's lines
checked, indexed and masked (tape.py), a secret spelled across an answer's pieces masked
(pieces.py), and a recorded answer played as the engine's (replayed.py)."""
