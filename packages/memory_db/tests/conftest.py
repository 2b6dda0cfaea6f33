"""memory-db's tests: the hypothesis profile its property tests run under."""

from hypothesis import HealthCheck, settings

# Property tests (hypothesis) are repeatable, a fixed derivation of examples from each test and
# no example database written into the checkout, and do not fail on a loaded machine because
# generating inputs or running one example took long: they check behaviour, never time.
settings.register_profile(
    "repo",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("repo")
