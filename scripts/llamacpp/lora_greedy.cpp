// llama.cpp's greedy continuation of a prompt, with a LoRA adapter applied by
// llama.cpp itself (llama_adapter_lora_init + llama_set_adapters_lora).
//
// usage: lora_greedy BASE.gguf ADAPTER.gguf IDS N   (ADAPTER `-`: the base alone)
//   IDS: the prompt's ids, comma-separated. Prints the N ids it picks (argmax of
//   each next-token distribution, end-of-generation tokens included),
//   comma-separated, on stdout.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s BASE.gguf ADAPTER.gguf IDS N\n", argv[0]); return 2; }
    std::vector<llama_token> ids;
    std::stringstream ss(argv[3]);
    for (std::string s; std::getline(ss, s, ',');) ids.push_back((llama_token) atoi(s.c_str()));
    const int n_new = atoi(argv[4]);
    if (ids.empty() || n_new <= 0) { fprintf(stderr, "need a prompt and N > 0\n"); return 2; }

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "llama.cpp cannot load %s\n", argv[1]); return 1; }
    const bool with_lora = strcmp(argv[2], "-") != 0;
    llama_adapter_lora * lora = with_lora ? llama_adapter_lora_init(model, argv[2]) : nullptr;
    if (with_lora && !lora) { fprintf(stderr, "llama.cpp cannot load the adapter %s\n", argv[2]); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (ids.size() + n_new); cp.n_batch = cp.n_ctx; cp.n_ubatch = cp.n_ctx;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;  // as lora_logits.cpp: no f16 cache, no flash attention
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "no context\n"); return 1; }
    float scale = 1.0f;
    if (with_lora && llama_set_adapters_lora(ctx, &lora, 1, &scale) != 0) { fprintf(stderr, "cannot set the adapter\n"); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    llama_batch batch = llama_batch_get_one(ids.data(), (int32_t) ids.size());
    for (int i = 0; i < n_new; i++) {
        if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "llama_decode failed\n"); return 1; }
        const float * logits = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (llama_token t = 1; t < n_vocab; t++) if (logits[t] > logits[best]) best = t;
        printf(i ? ",%d" : "%d", best);
        ids.push_back(best);
        batch = llama_batch_get_one(&ids.back(), 1);
    }
    printf("\n");
    llama_free(ctx);
    if (lora) llama_adapter_lora_free(lora);
    llama_model_free(model);
    return 0;
}
