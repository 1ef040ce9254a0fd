// llama.cpp's next-token logits for one token sequence, with a LoRA adapter
// applied by llama.cpp itself (llama_adapter_lora_init + llama_set_adapters_lora).
//
// usage: lora_logits BASE.gguf ADAPTER.gguf IDS.bin N OUT.f32
//   ADAPTER.gguf: `-` for the base model alone.
//   IDS.bin: little-endian 32-bit ids; the first N are decoded in one batch.
//   OUT.f32: N rows of n_vocab little-endian floats (row i: logits after id i).
#include "llama.h"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s BASE.gguf ADAPTER.gguf IDS.bin N OUT.f32\n", argv[0]); return 2; }
    const int n = atoi(argv[4]);
    std::ifstream in(argv[3], std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if ((int) (raw.size() / 4) < n || n <= 0) { fprintf(stderr, "%s holds fewer than %d ids\n", argv[3], n); return 2; }
    std::vector<llama_token> ids(n);
    for (int i = 0; i < n; i++) { uint32_t v; memcpy(&v, raw.data() + 4 * i, 4); ids[i] = (llama_token) v; }

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "llama.cpp cannot load %s\n", argv[1]); return 1; }
    const bool with_lora = strcmp(argv[2], "-") != 0;
    llama_adapter_lora * lora = with_lora ? llama_adapter_lora_init(model, argv[2]) : nullptr;
    if (with_lora && !lora) { fprintf(stderr, "llama.cpp cannot load the adapter %s\n", argv[2]); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n; cp.n_batch = n; cp.n_ubatch = n; cp.n_threads = 1; cp.n_threads_batch = 1;
    // An f32 cache: llama.cpp's default f16 keys and values round at ~1e-3,
    // more than the differences this check looks for.
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "no context\n"); return 1; }
    float scale = 1.0f;
    if (with_lora && llama_set_adapters_lora(ctx, &lora, 1, &scale) != 0) { fprintf(stderr, "cannot set the adapter\n"); return 1; }

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = ids[i]; batch.pos[i] = i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "llama_decode failed\n"); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE * out = fopen(argv[5], "wb");
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, out);
    fclose(out);
    fprintf(stderr, "wrote %d x %d logits\n", n, n_vocab);
    llama_batch_free(batch);
    llama_free(ctx);
    if (lora) llama_adapter_lora_free(lora);
    llama_model_free(model);
    return 0;
}
