"""How an array is placed on the devices, as one string two processes can compare (the worker
says where the learner's arrays are; the judge computes where they should be)."""


def sharding_key(sharding, ndim: int) -> str | None:
    """What Sharding.is_equivalent_to compares, as one string: the HLO sharding for `ndim`
    dimensions (every replicated one reads "replicated", tile assignments as explicit device
    lists), the devices in order and the memory kind. Equal keys: equivalent shardings. None when
    there is no sharding to read."""
    try:
        hlo_sharding = sharding._to_xla_hlo_sharding(ndim)
        if hlo_sharding.num_devices() == 1 or hlo_sharding.is_replicated():
            layout = "replicated"
        elif hlo_sharding.is_tiled() and not hlo_sharding.tuple_elements():
            layout = (f"tiled {list(hlo_sharding.tile_assignment_dimensions())} "
                      f"over {list(hlo_sharding.tile_assignment_devices())}, "
                      f"last tile dim replicated: {hlo_sharding.replicate_on_last_tile_dim()}, "
                      f"subgroups {[str(t) for t in hlo_sharding.subgroup_types()]}, "
                      f"manual: {hlo_sharding.is_manual()}, unreduced: {hlo_sharding.is_unreduced()}")
        else:
            layout = hlo_sharding.to_string()
        devices = [int(d.id) for d in sharding._internal_device_list]
        return f"{layout}; devices {devices}; memory {sharding.memory_kind}"
    except Exception:  # no sharding, or not one of JAX's (the check then finds it is not the one expected)
        return None
