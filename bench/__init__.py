"""The benchmarks of ``make bench``, kept out of the package; each module runs as a script.

``search`` (speed and shrink goals) writes ``docs/benchmarks.md``; ``fuzz``
(campaigns scaling with workers) and ``soak`` (every mutant through check and
fuzz, under a watchdog) add their sections to it.
"""
