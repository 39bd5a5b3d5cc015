"""Common English words the fake model writes, so its text reads plausibly.

Plain data, not spec: vocab.py keeps only the words that are one Llama 3 token
with a leading space.
"""

WORDS: tuple[str, ...] = tuple(
    """
    the of and to in is was for on that with as it by at from his her their this which
    were are have had has been not but all one they there when more other some new after
    into what about over only also than first two most can would could may will made
    time years people world year state city part family life day days work water house
    light river mountain forest garden road village morning evening night summer winter
    spring sky sun moon star stars cloud clouds rain wind sea ocean island field fields
    stone wall door window table book letter story music song voice name place home
    country land town school church market street bridge tree trees flower flowers bird
    birds horse dog cat fish small large old young long short high low great little good
    best early late blue green red white black golden bright dark quiet warm cold soft
    deep open clear strong simple quick slow gentle calm wide narrow said went came saw
    took gave found called made began turned looked walked moved stood sat kept left
    told heard knew thought felt seemed became brought held wrote read built grew ran
    carried opened followed watched waited across along around behind between during
    under above near toward through before again never always often still almost nearly
    perhaps together because while until although however then now here where every each
    many much few king queen child children father mother brother sister friend man
    woman men women teacher doctor farmer captain soldier student writer painter
""".split()
)
