"""Checks made after the sweep chose, each with servers of its own: do the chosen arm's sampled
answers stay as plain decoding's, and which other engine settings stage 3 should run it with.

- answers.py          the answers check: the pilot's prompts sampled by plain and by the chosen arm,
                      compared by a permutation test; an arm that changed them is set aside
- settings_sweep.py   the settings sweep (`decide.backends`): the chosen arm at the top level under
                      other attention / sampling backends (not kit/probe/backends.py: which can run)
- settings_choice.py  which setting the settings sweep hands stage 3 (a lead outside the noise)

Imports choose/ and measure/ below it (the sweep's servers and levels run its measurements);
nothing of forecast/ or views/. Importing the package loads nothing: each module is imported by name.
"""
