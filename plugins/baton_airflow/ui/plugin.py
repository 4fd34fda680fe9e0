"""The Airflow plugin of the Baton page: its FastAPI app under /baton and its entry in the navigation
(baton_airflow.ui.baton_page). Registered through the package's `airflow.plugins` entry point, so an
Airflow deployment that installs Baton gets the page with its operators, with nothing to copy into its
plugins folder."""

from airflow.plugins_manager import AirflowPlugin

from baton_airflow.ui.baton_page import app


class BatonPagePlugin(AirflowPlugin):
    name = "baton"
    fastapi_apps = [{"app": app, "url_prefix": "/baton", "name": "Baton"}]
    external_views = [
        {
            "name": "Baton",
            "href": "baton/",
            "url_route": "baton",
            "destination": "nav",
            "nav_top_level": True,
            "icon": "baton/icon.svg",
        }
    ]
