# Sourced by the llama.cpp checkers: sets $llama (the llama.cpp source cargo
# fetched for ggml-sys, the llama-cpp-sys-2 package; override with LLAMA_CPP_DIR)
# and $build ($LLAMA_BUILD_DIR, default target/llamacpp), and builds libllama
# (CPU) there once. Needs cmake and a C++ compiler.
llama="${LLAMA_CPP_DIR:-$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-0.1.161/llama.cpp 2>/dev/null | head -1)}"
[ -d "$llama" ] || { echo "llama.cpp source not found: set LLAMA_CPP_DIR" >&2; exit 2; }
build="${LLAMA_BUILD_DIR:-$here/../../target/llamacpp}"
mkdir -p "$build"
if [ ! -e "$build/bin/libllama.so" ]; then
  cmake -S "$llama" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF > "$build.cmake.log" 2>&1 || { tail -20 "$build.cmake.log"; exit 1; }
  cmake --build "$build" --target llama -j "$(nproc)" > "$build.build.log" 2>&1 || { tail -20 "$build.build.log"; exit 1; }
fi
