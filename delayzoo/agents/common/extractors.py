"""Features extractors for SB3 policies on small images, such as MinAtar's 10x10 frames.

SB3's ``NatureCNN`` needs images of at least 36 pixels and ``CombinedExtractor`` sends only uint8
images to it, so a float ``(C, 10, 10)`` frame would be flattened into an MLP. :class:`SmallCNN` is
the network of the MinAtar paper (Young and Tian, 2019): one 3x3 convolution with 16 channels,
stride 1, then a linear layer of 128 units. Under the pending view it takes the ``Dict`` observation
too, so that an agent keeps the same image network with and without the view::

    PPO("CnnPolicy", env, policy_kwargs=dict(features_extractor_class=SmallCNN, normalize_images=False))
    PPO("MultiInputPolicy", PendingActionsObservation(env), policy_kwargs=dict(features_extractor_class=SmallCNN))
"""

from __future__ import annotations

import gymnasium as gym
import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

__all__ = ["SmallCNN"]

IMAGE_KEY = "observation"
"""The ``Dict`` entry :class:`SmallCNN` convolves (``PendingActionsObservation``'s frame)."""


class SmallCNN(BaseFeaturesExtractor):
    """One 3x3 convolution and a linear layer over a channels-first image (plus the flat rest of a ``Dict``).

    :param observation_space: a ``(C, H, W)`` Box, or a ``Dict`` whose ``"observation"`` is one; the
        other entries (pending actions, delay; already one-hot encoded by SB3's preprocessing) are
        flattened and concatenated to the image features
    :param features_dim: width of the linear layer over the image features
    :param channels: channels of the convolution
    """

    def __init__(self, observation_space: gym.Space, features_dim: int = 128, channels: int = 16) -> None:
        image = observation_space[IMAGE_KEY] if isinstance(observation_space, spaces.Dict) else observation_space
        if not isinstance(image, spaces.Box) or len(image.shape) != 3:
            raise ValueError(
                f"SmallCNN needs a channels-first image (C, H, W), or a Dict with one as {IMAGE_KEY!r}; "
                f"got {observation_space}"
            )
        rest = (
            {key: space for key, space in observation_space.spaces.items() if key != IMAGE_KEY}
            if isinstance(observation_space, spaces.Dict)
            else {}
        )
        rest_dim = sum(get_flattened_obs_dim(space) for space in rest.values())
        super().__init__(observation_space, features_dim + rest_dim)
        in_channels, height, width = image.shape
        self.rest_keys = sorted(rest)
        self.cnn = nn.Sequential(
            nn.Conv2d(in_channels, channels, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(channels * (height - 2) * (width - 2), features_dim),
            nn.ReLU(),
        )

    def forward(self, observations: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        if not isinstance(observations, dict):
            return self.cnn(observations)
        parts = [self.cnn(observations[IMAGE_KEY])]
        parts += [observations[key].flatten(1) for key in self.rest_keys]
        return torch.cat(parts, dim=1)
