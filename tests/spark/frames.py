"""DataFrames over a streamlog database, the way the Spark tests build them."""


def read(spark, path, **options):
    """spark.read.format("streamlog") with these options, loaded from path."""
    reader = spark.read.format("streamlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)
