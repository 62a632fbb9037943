/* The simulated host's inventory, compiled into the library.
 *
 * `nvidia-ctk simulate create` writes inventory.c (one `sim_host` definition) from the host it
 * builds, so the library knows its GPUs without reading any file: inside a container only the
 * injected files exist, and the marker file of the host is not one of them. */
#ifndef NVML_SIM_INVENTORY_H
#define NVML_SIM_INVENTORY_H

/* A GPU instance profile of a MIG-capable model (one row of `nvidia-smi mig -lgip`). */
struct sim_gi_profile {
    unsigned int index;          /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned int id;             /* profile id, e.g. 19 for 1g.5gb */
    const char *name;            /* "1g.5gb" */
    unsigned int slices;         /* compute slices */
    unsigned int instance_count; /* how many fit on one GPU */
    unsigned int multiprocessors;
    unsigned int copy_engines, decoders, encoders, jpegs, ofas;
    unsigned long long memory_mb;
};

/* One MIG device: a GPU instance with one compute instance, spanning it or smaller (ci_slices). */
struct sim_mig {
    const char *uuid;            /* "MIG-..." */
    unsigned int gi_id, ci_id;
    unsigned int gi_profile;     /* index into the parent's profile table */
    unsigned int placement_start, placement_size;
    unsigned int gi_cap_minor, ci_cap_minor;
    unsigned int ci_slices;      /* the compute instance's slices: the GPU instance's, or fewer (1c.3g.20gb) */
};

struct sim_gpu {
    unsigned int minor;          /* /dev/nvidia<minor> */
    const char *name;
    const char *uuid;
    unsigned int pci_domain, pci_bus, pci_device;
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned int brand;          /* nvmlBrandType_t */
    unsigned int architecture;   /* nvmlDeviceArchitecture_t */
    int cc_major, cc_minor;
    unsigned long long memory_mb;
    unsigned int multiprocessors;
    unsigned int total_slices;   /* 7 on A100/H100, 4 on A30; 0 = not MIG-capable */
    unsigned int power_limit_w;
    int mig_enabled;
    const struct sim_gi_profile *profiles;
    unsigned int profile_count;
    const struct sim_mig *migs;
    unsigned int mig_count;
    unsigned int nvlink_count;   /* NVLinks the GPU has: links 0..nvlink_count-1 */
    const int *nvlink_remote;    /* [link]: index into sim_host.gpus of the GPU at the other end, -1 inactive */
};

struct sim_host {
    const char *driver_version;  /* "550.54.15" */
    int cuda_version;            /* 12040 */
    const struct sim_gpu *gpus;
    unsigned int gpu_count;
    const unsigned char *pcie_levels; /* [a * gpu_count + b]: nvmlGpuTopologyLevel_t of GPUs a and b */
};

extern const struct sim_host sim_host;

#endif
