"""PWM's encoder and decoder for small multi-channel frames (``world_model_kwargs=dict(frames="conv")``)."""

import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.pwm import PWM
from delayzoo.agents.pwm.frames import FrameDecoder, FrameEncoder, frame_reconstruction_loss, is_frame_space
from delayzoo.agents.pwm.world_model import ObservationLayout, WorldModel, WorldModelConfig

MINATAR = spaces.Box(0.0, 1.0, (4, 10, 10), np.float32)
TINY = WorldModelConfig(
    stoch=4, classes=4, mlp_units=16, mlp_layers=1, seq_width=16, seq_cells=1, seq_divisor=2, reward_bins=21
)


def test_frame_spaces_are_float_channels_first_boxes_in_the_unit_interval():
    assert is_frame_space(MINATAR)
    assert not is_frame_space(spaces.Box(0, 255, (3, 10, 10), np.uint8))
    assert not is_frame_space(spaces.Box(-1.0, 1.0, (4, 10, 10), np.float32))
    assert not is_frame_space(spaces.Box(0.0, 1.0, (40, 10), np.float32))


def test_layout_reads_frames_only_when_asked():
    assert ObservationLayout(MINATAR).vector_size == 400
    assert ObservationLayout(MINATAR).frame_shape is None
    layout = ObservationLayout(MINATAR, frames=True)
    assert layout.frame_shape == (4, 10, 10) and layout.vector_size == 0
    both = spaces.Dict({"a": MINATAR, "b": spaces.Box(0.0, 1.0, (2, 10, 10), np.float32), "v": spaces.Discrete(3)})
    layout = ObservationLayout(both, frames=True)
    assert layout.frame_shape == (6, 10, 10) and layout.vector_size == 3
    obs = {"a": torch.ones(5, 4, 10, 10), "b": torch.zeros(5, 2, 10, 10), "v": torch.zeros(5)}
    frames = layout.frames(obs, 1)
    assert frames.shape == (5, 6, 10, 10) and frames[:, :4].eq(1).all() and frames[:, 4:].eq(0).all()


@pytest.mark.parametrize("shape", [(4, 10, 10), (2, 7, 9)])
@pytest.mark.parametrize("channels", [(16, 32), (8,)])
def test_encoder_and_decoder_keep_the_frame_side(shape, channels):
    encoder = FrameEncoder(shape, channels, "group")
    decoder = FrameDecoder(12, shape, channels, "group")
    embedding = encoder(torch.rand(3, 5, *shape))
    assert embedding.shape == (3, 5, encoder.out_size) and encoder.out_size == channels[-1] * shape[1] * shape[2]
    assert decoder(torch.randn(3, 5, 12)).shape == (3, 5, *shape)


def test_reconstruction_losses_are_the_bernoulli_likelihood_and_the_squared_error():
    logits = torch.tensor([[[[2.0, -1.0]]]])
    frames = torch.tensor([[[[1.0, 0.0]]]])
    p = torch.sigmoid(logits)
    bce = -(torch.log(p[..., 0]) + torch.log(1 - p[..., 1])).sum()
    torch.testing.assert_close(frame_reconstruction_loss(logits, frames, "bce"), bce)
    mse = 0.5 * ((p[..., 0] - 1) ** 2 + p[..., 1] ** 2).sum()
    torch.testing.assert_close(frame_reconstruction_loss(logits, frames, "mse"), mse)


@pytest.mark.parametrize("loss", ["bce", "mse"])
def test_world_model_learns_to_reconstruct_binary_frames(loss):
    """400 steps on one batch of sparse binary frames: the decoded frames beat the best frame that ignores
    the observation by a wide margin (so the latent carries them)."""
    torch.manual_seed(0)
    config = dataclasses.replace(TINY, frames="conv", frame_channels=(8, 16), frame_loss=loss, norm="group")
    model = WorldModel(ObservationLayout(MINATAR, frames=True), 3, config)
    frames = (torch.rand(6, 4, 4, 10, 10) < 0.08).float()
    action = torch.nn.functional.one_hot(torch.randint(0, 3, (6, 4)), 3).float()
    zeros = torch.zeros(6, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def reconstruction_error():
        with torch.no_grad():
            latent = model.sample_latent(model.encode(frames, 2), deterministic=True)
            return (torch.sigmoid(model.frame_decoder(latent)) - frames).abs().mean().item()

    # The best frame that ignores the observation: every pixel at its mean over the batch.
    constant = (frames.mean((0, 1), keepdim=True) - frames).abs().mean().item()
    for _ in range(400):
        world_loss, metrics, _ = model.loss(frames, action, zeros, zeros, torch.zeros(6, 4, dtype=torch.bool))
        optimizer.zero_grad()
        world_loss.backward()
        optimizer.step()
    error = reconstruction_error()
    assert error < 0.6 * constant
    assert metrics["reconstruction_loss"] > 0


def test_pwm_trains_saves_and_loads_on_minatar_frames(tmp_path):
    pytest.importorskip("minatar")
    from delayzoo.wrappers.minatar import make_minatar

    kwargs = dict(
        world_model_kwargs=dict(
            stoch=4, classes=4, mlp_units=16, mlp_layers=1, seq_width=16, seq_cells=1, seq_divisor=2, frames="conv"
        ),
        actor_critic_kwargs=dict(units=16, layers=1),
    )
    model = PWM(
        "MlpPolicy",
        make_minatar("MinAtar/Breakout-v1"),
        learning_starts=64,
        batch_size=4,
        sequence_length=8,
        policy_kwargs=kwargs,
        seed=0,
    )
    model.learn(96)
    assert model.policy.world_model.frame_encoder is not None and model.policy.world_model.layout.vector_size == 0
    assert np.isfinite(model.logger.name_to_value["train/reconstruction_loss"])
    model.save(tmp_path / "model")
    loaded = PWM.load(tmp_path / "model")
    obs = make_minatar("MinAtar/Breakout-v1").reset(seed=1)[0]
    model.policy.set_training_mode(False)
    for name, tensor in model.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[name], tensor, msg=name)
    assert loaded.predict(obs, deterministic=True)[0] in range(3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(frames="pixels"), "Unknown frames 'pixels'"),
        (dict(frames="conv", frame_loss="l1"), "Unknown frame_loss 'l1'"),
        (dict(frames="conv", frame_channels=()), "frame_channels must be"),
    ],
)
def test_bad_frame_settings_are_named(kwargs, message):
    config = dataclasses.replace(TINY, **kwargs)
    with pytest.raises(ValueError, match=message):
        WorldModel(ObservationLayout(MINATAR, frames=kwargs["frames"] == "conv"), 3, config)


def test_conv_frames_need_a_frame_space():
    with pytest.raises(ValueError, match=r"frames='conv' needs a float \(C, H, W\) Box"):
        PWM("MlpPolicy", "CartPole-v1", policy_kwargs=dict(world_model_kwargs=dict(frames="conv")))
