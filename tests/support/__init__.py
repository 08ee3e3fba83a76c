"""What the tests share and are not tests themselves: helpers that drive the product as its DAGs
do, read Postgres back and stage rows without Spark; the browser, HTTP and proxy harnesses; and
the independent models (oracle, protocol model, hostile corpus) that import nothing of the product."""
