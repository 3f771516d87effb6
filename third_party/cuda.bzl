"""cuda_library: compiles .cu files with nvcc (from @local_cuda) into a cc_library.

nvcc is called by its absolute path: it finds cicc, ptxas and its headers
relative to its real location, which a symlink in the sandbox would hide.
"""

load("@local_cuda//:defs.bzl", "CUDA_ROOT")

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_hdrs = [], **kwargs):
    """nvcc_hdrs: headers of other packages that the .cu files include."""
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_compile",
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            cmd = (CUDA_ROOT + "/bin/nvcc -c $(location {src}) -o $@ -I. " +
                   "-std=c++17 -O3 -Xcompiler -fPIC " +
                   "-gencode arch=compute_90,code=[sm_90,compute_90]").format(src = src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        **kwargs
    )
