import pytest

from proxy.balancer import Balancer
from proxy.catalog import Catalog, parse_models
from proxy.errors import BadGateway, ModelNotFound, UpstreamUnavailable
from proxy.metrics import Metrics
from proxy.upstream import Upstream
from tests.support.fake_upstream import FakeVllm


def catalog(fake: FakeVllm, **kw) -> Catalog:
    return Catalog(Upstream(fake.transport, Balancer(("http://v:1",), 1), Metrics()), **kw)


def test_parse_models():
    info = parse_models(b'{"data": [{"id": "m", "root": "/p", "max_model_len": 99}]}')["m"]
    assert (info.root, info.max_model_len) == ("/p", 99)
    with pytest.raises(BadGateway):
        parse_models(b'{"nope": 1}')


async def test_resolve_known_default_and_unknown():
    fake = FakeVllm(max_model_len=77)
    cat = catalog(fake, min_refresh=3600)
    assert (await cat.resolve("tiny")).max_model_len == 77
    assert (await cat.resolve(None)).name == "tiny"
    with pytest.raises(ModelNotFound, match="Valid aliases: tiny") as info:
        await cat.resolve("other")
    assert info.value.status == 404 and info.value.param == "model"


async def test_unknown_names_refresh_the_list_and_on_models_is_told():
    seen = []

    async def told(models):
        seen.append(sorted(models))

    fake = FakeVllm()
    cat = catalog(fake, min_refresh=0, on_models=told)
    await cat.resolve("tiny")
    fake.model = "renamed"
    assert (await cat.resolve("renamed")).name == "renamed"
    assert seen == [["tiny"], ["renamed"]]


async def test_upstream_down_before_any_list_is_an_upstream_error():
    fake = FakeVllm(connect_error={"http://v:1"})
    with pytest.raises(UpstreamUnavailable):
        await catalog(fake).resolve("tiny")
