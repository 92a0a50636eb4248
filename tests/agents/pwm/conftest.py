import pytest
import torch


@pytest.fixture(autouse=True)
def single_torch_thread():
    """Tiny models run fastest on one thread, and the test machines are shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
