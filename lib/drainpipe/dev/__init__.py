"""``drainpipe dev``: the whole serverless setup on one machine.

:mod:`.functions` serves a folder of function files as Vercel does, :mod:`.server` runs
uvicorn in the current loop, :mod:`.console` prints failures and the live stats line, and
:mod:`.run` puts them together with the database and the dev drain.
"""
