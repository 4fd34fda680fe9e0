"""click_counts with the test fault tests.support.late_position installed: a slot of an app whose
definition names this module passes the next fence or check position its fault file names before it
sees it. Imported by the slot's driver (its frame), and by its Spark Python workers, where nothing
reads control records."""

from spark_apps.apps.click_counts import *  # noqa: F403 (the app is click_counts, all of it)
from tests.support.late_position import install

install()
