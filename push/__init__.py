# The SSRF guard moved to the bottom layer (outbound/). `push.ssrf` still names it, the very
# module and not a copy, so whatever patches `push.ssrf` (the tests' fake resolver) patches the
# guard every caller uses.
from outbound import ssrf as ssrf
