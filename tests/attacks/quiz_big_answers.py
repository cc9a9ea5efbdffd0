"""The quiz's ANSWERS carry 100 kB more than the letters: the values a confined process reads are
sent on to the process that grades them, in one message to the fork server. Too long a message
must cost this quiz its points, and nothing more (the fork server must not die of it).
"""
# @HONEST@
if _MODULE == "quiz":
    ANSWERS = dict(ANSWERS, padding="x" * 100_000)
