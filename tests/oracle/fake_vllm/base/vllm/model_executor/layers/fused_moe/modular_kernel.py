from vllm.platforms import current_platform


class FusedMoEExperts:
    @staticmethod
    def is_supported_config(cls, moe_config, weight_key, activation_key):
        if not cls._supports_current_device():
            return False, f"kernel does not support current device {current_platform.device_name}"
        if not cls._supports_activation(moe_config.activation):
            return False, f"kernel does not support {moe_config.activation} activation"
        if not cls._supports_quant_scheme(weight_key, activation_key):
            return False, f"kernel does not support quantization scheme {weight_key}x{activation_key}"
        if not cls._supports_parallel_config(moe_config):
            return False, "kernel does not support parallel config"
        return True, None

    @staticmethod
    def _supports_activation(activation):
        return True

    @staticmethod
    def _supports_parallel_config(moe_config):
        return True


class TritonExperts(FusedMoEExperts):
    @staticmethod
    def _supports_current_device():
        return current_platform.has_device_capability(70)

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return weight_key is None or weight_key.dtype != "nvfp4"


class CutlassExperts(FusedMoEExperts):
    @staticmethod
    def _supports_current_device():
        return current_platform.is_device_capability_family(100)

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return weight_key is not None


class MarlinExperts(FusedMoEExperts):
    @staticmethod
    def _supports_current_device():
        return current_platform.has_device_capability(80)

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return weight_key is not None

    @staticmethod
    def _supports_parallel_config(moe_config):
        return moe_config.intermediate_size_per_partition % 512 == 0


class DeepGemmExperts(FusedMoEExperts):
    @staticmethod
    def _supports_current_device():
        from vllm.utils.deep_gemm import is_deep_gemm_supported

        return is_deep_gemm_supported()

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return True
