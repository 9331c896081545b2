class scalar_types:
    uint4b8 = "uint4b8"
