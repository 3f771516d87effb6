"""Finds the CUDA toolkit at /usr/local/cuda (or $CUDA_PATH).

Generates @local_cuda with `defs.bzl` exporting HAS_CUDA. When the toolkit is
absent, HAS_CUDA is False and the CUDA targets are simply not declared, so a
CPU-only machine builds and tests everything else.
"""

def _cuda_configure_impl(rctx):
    root = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = rctx.path(root + "/bin/nvcc")
    has_cuda = nvcc.exists and rctx.os.environ.get("KVCAST_NO_CUDA", "") != "1"
    if has_cuda:
        rctx.symlink(root + "/include", "include")
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcublas", "-lcudart"],
)
""".format(root = root))
    else:
        rctx.file("BUILD", "")
    rctx.file("defs.bzl", "HAS_CUDA = %s\nCUDA_ROOT = %r\n" % (has_cuda, root))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "KVCAST_NO_CUDA"],
    local = True,
)
