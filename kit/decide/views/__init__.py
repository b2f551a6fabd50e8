"""Stage 2 for reading: notebook 02 and the report's index page. Reads the run folder, changes nothing.

- notebook.py      notebook 02: the decision in Markdown, its tables and figures, what MTP would be worth
- verdict.py       the decision in sentences: the chosen arm, measured or predicted, its lead
- plots.py         seaborn figures with alt text: measured beside predicted tok/s, the ratio, memory
- worth.py         what the model's MTP heads would be worth, as a band over accept lengths
- whatif_model.py  the what-if's predictions: a run's basis, a scenario of the controls -> the ratio
- whatif.py        notebook 02's what-if control: the predicted ratio re-drawn beside the measured points

Imports choose/, measure/ (the interval the sweep states) and costmodel/ below it; nothing of
decide imports it but the stage's entry (the wiring, the index page and the later stages read it
too). Importing the package loads nothing: each
module is imported by name.
"""
