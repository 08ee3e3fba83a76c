"""spark-submit entry points (installed as ``reprocess.spark_apps``), shipped inside the wheel so a
run needs no checkout of the repo.

``spark-submit`` takes a file, not a module, so a launcher is given the path of the installed file
(:func:`reprocess.spark.entry_points.app_path`). The entry points live in a folder of their own,
not next to the library's modules: Python puts a script's folder first on ``sys.path``, and this
folder holds nothing a library import could pick up by mistake. Each one parses its arguments
and calls the library; nothing imports them.
"""
