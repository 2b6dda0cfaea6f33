"""Root test configuration: the real-PostgreSQL fixtures every package's tests share."""

pytest_plugins = ["memory_db.testing.fixtures"]
