"""SmallCNN: the MinAtar paper's network as an SB3 features extractor, on images and on the pending view."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.preprocessing import preprocess_obs

from delayzoo.agents.common.extractors import SmallCNN

IMAGE = spaces.Box(0.0, 1.0, (4, 10, 10), np.float32)


def test_one_3x3_convolution_of_16_channels_then_128_units_on_a_channels_first_image():
    extractor = SmallCNN(IMAGE)
    conv, linear = extractor.cnn[0], extractor.cnn[3]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (4, 16, (3, 3), (1, 1))
    assert (linear.in_features, linear.out_features) == (16 * 8 * 8, 128) and extractor.features_dim == 128
    assert extractor(torch.zeros(5, 4, 10, 10)).shape == (5, 128)


def test_the_pending_view_is_concatenated_after_the_image_features():
    pending = {"pending_actions": spaces.MultiDiscrete([3] * 5), "delay": spaces.Discrete(6)}
    space = spaces.Dict({"observation": IMAGE, **pending})
    extractor = SmallCNN(space)
    assert extractor.features_dim == 128 + 5 * 3 + 6
    sample = {key: torch.as_tensor(np.stack([value.sample() for _ in range(2)])) for key, value in space.spaces.items()}
    features = extractor(preprocess_obs(sample, space))
    assert features.shape == (2, 149)
    image_only = extractor.cnn(preprocess_obs(sample, space)["observation"])
    torch.testing.assert_close(features[:, :128], image_only)


def test_a_vector_space_is_refused_naming_what_it_needs():
    with pytest.raises(ValueError, match="SmallCNN needs a channels-first image"):
        SmallCNN(spaces.Box(0.0, 1.0, (8,), np.float32))


def test_ppo_takes_it_through_policy_kwargs():
    from delayzoo.wrappers.minatar import make_minatar

    pytest.importorskip("minatar")
    kwargs = dict(features_extractor_class=SmallCNN, normalize_images=False)
    model = PPO("CnnPolicy", make_minatar("MinAtar/Breakout-v1"), n_steps=32, batch_size=32, policy_kwargs=kwargs)
    model.learn(64)
    assert isinstance(model.policy.features_extractor, SmallCNN)
