class _Cfg:
    def __init__(self, raw):
        self.raw = raw

    @classmethod
    def from_config(cls, raw):
        return cls(raw)


def get_quantization_config(name):
    return _Cfg
