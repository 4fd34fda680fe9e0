"""The Baton page's plugin: registered in the UI's navigation, and no route answers without an Airflow
user (Airflow does not authenticate plugin apps; the plugin must)."""

import pytest
from fastapi.testclient import TestClient

from baton_airflow.ui import baton_page
from baton_airflow.ui.plugin import BatonPagePlugin


@pytest.fixture(scope="module", autouse=True)
def auth_manager():
    """The API server's auth manager (Airflow's default, the simple one), as in the API server."""
    from airflow.api_fastapi.app import init_auth_manager

    init_auth_manager()


def test_the_plugin_mounts_its_app_and_adds_the_page_to_the_navigation():
    plugin = BatonPagePlugin
    assert plugin.fastapi_apps == [{"app": baton_page.app, "url_prefix": "/baton", "name": "Baton"}]
    view = plugin.external_views[0]
    assert (view["href"], view["url_route"], view["destination"]) == ("baton/", "baton", "nav")


@pytest.mark.parametrize("path", ["/", "/api/apps", "/metrics", "/icon.svg"])
def test_every_route_refuses_a_caller_without_an_airflow_user(path):
    client = TestClient(baton_page.app)
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer not-a-jwt"}).status_code in (401, 403)


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_no_documentation_route_is_served_outside_the_authentication(path):
    assert TestClient(baton_page.app).get(path).status_code in (401, 404)
