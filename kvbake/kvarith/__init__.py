"""KV-cache capacity and pressure arithmetic of vLLM 0.33.0 for DeepSeek-V4/V4.1-Flash (standard library only)."""

from kvbake.kvarith.calculator import Analysis, analyze
from kvbake.kvarith.capacity import Capacity, ServeSettings
from kvbake.kvarith.config import ModelConfig, load_config, parse_config
from kvbake.kvarith.specs import SpecOptions

__all__ = ["Analysis", "Capacity", "ModelConfig", "ServeSettings", "SpecOptions", "analyze", "load_config",
           "parse_config"]
