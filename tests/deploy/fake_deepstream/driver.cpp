// Test driver for jetforge's generated nvinfer parsers (with the FakeDeepStreamHeader): reads raw float32
// outputs from files, calls the parser as nvinfer would for one frame, prints one line per result.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "nvdsinfer_custom_impl.h"

extern "C" bool NvDsInferParseCustomJetforgeSSD(std::vector<NvDsInferLayerInfo> const &, NvDsInferNetworkInfo const &,
                                                NvDsInferParseDetectionParams const &,
                                                std::vector<NvDsInferObjectDetectionInfo> &) __attribute__((weak));
extern "C" bool NvDsInferClassiferParseCustomJetforgeSoftmax(std::vector<NvDsInferLayerInfo> const &,
                                                             NvDsInferNetworkInfo const &, float,
                                                             std::vector<NvDsInferAttribute> &,
                                                             std::string &) __attribute__((weak));

static std::vector<float> readFloats(const char *path) {
    std::vector<float> out;
    FILE *f = std::fopen(path, "rb");
    if (!f) { std::perror(path); std::exit(2); }
    float v;
    while (std::fread(&v, sizeof(float), 1, f) == 1) out.push_back(v);
    std::fclose(f);
    return out;
}

static NvDsInferLayerInfo layer(const char *name, std::vector<float> &data) {
    NvDsInferLayerInfo info = {};
    info.dataType = FLOAT;
    info.inferDims.numDims = 1;
    info.inferDims.d[0] = static_cast<unsigned int>(data.size());
    info.inferDims.numElements = static_cast<unsigned int>(data.size());
    info.layerName = name;
    info.buffer = data.data();
    return info;
}

int main(int argc, char **argv) {
    // ssd NAME_BOXES BOXES.bin NAME_LOGITS LOGITS.bin WIDTH HEIGHT THRESHOLD
    // softmax NAME LOGITS.bin THRESHOLD
    if (argc >= 9 && std::string(argv[1]) == "ssd") {
        std::vector<float> boxes = readFloats(argv[3]), logits = readFloats(argv[5]);
        std::vector<NvDsInferLayerInfo> layers = {layer(argv[2], boxes), layer(argv[4], logits)};
        NvDsInferNetworkInfo net = {static_cast<unsigned int>(std::atoi(argv[6])),
                                    static_cast<unsigned int>(std::atoi(argv[7])), 3};
        NvDsInferParseDetectionParams params;
        params.numClassesConfigured = 1;
        params.perClassPreclusterThreshold = {static_cast<float>(std::atof(argv[8]))};
        std::vector<NvDsInferObjectDetectionInfo> objects;
        if (!NvDsInferParseCustomJetforgeSSD(layers, net, params, objects)) return 1;
        for (auto const &o : objects)
            std::printf("%u %.9g %.9g %.9g %.9g %.9g\n", o.classId, o.left, o.top, o.width, o.height,
                        o.detectionConfidence);
        return 0;
    }
    if (argc >= 5 && std::string(argv[1]) == "softmax") {
        std::vector<float> logits = readFloats(argv[3]);
        std::vector<NvDsInferLayerInfo> layers = {layer(argv[2], logits)};
        NvDsInferNetworkInfo net = {224, 224, 3};
        std::vector<NvDsInferAttribute> attrs;
        std::string desc;
        if (!NvDsInferClassiferParseCustomJetforgeSoftmax(layers, net, static_cast<float>(std::atof(argv[4])), attrs,
                                                          desc)) return 1;
        for (auto const &a : attrs) std::printf("%u %.9g %s\n", a.attributeValue, a.attributeConfidence, a.attributeLabel);
        return 0;
    }
    std::fprintf(stderr, "usage: driver ssd|softmax ...\n");
    return 2;
}
