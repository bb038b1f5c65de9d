// FakeDeepStreamHeader: a stand-in for DeepStream's nvdsinfer_custom_impl.h / nvdsinfer.h, for jetforge's tests.
// It declares only what jetforge's generated parsers use, with the members, types and order of the
// documented structures (DeepStream SDK API reference, nvdsinfer.h and nvdsinfer_custom_impl.h), so the
// generated source compiles and runs here; DeepStream itself is not installed on jetforge's CI machines.
#ifndef FAKE_NVDSINFER_CUSTOM_IMPL_H
#define FAKE_NVDSINFER_CUSTOM_IMPL_H
#include <string>
#include <vector>

#define NVDSINFER_MAX_DIMS 8
typedef struct { unsigned int numDims; unsigned int d[NVDSINFER_MAX_DIMS]; unsigned int numElements; } NvDsInferDims;
typedef enum { FLOAT = 0, HALF = 1, INT8 = 2, INT32 = 3 } NvDsInferDataType;
typedef struct {
    NvDsInferDataType dataType;
    union { NvDsInferDims inferDims; NvDsInferDims dims; };
    int bindingIndex;
    const char *layerName;
    void *buffer;
    int isInput;
} NvDsInferLayerInfo;
typedef struct { unsigned int width; unsigned int height; unsigned int channels; } NvDsInferNetworkInfo;
typedef struct {
    unsigned int classId; float left; float top; float width; float height; float detectionConfidence;
} NvDsInferObjectDetectionInfo;
typedef struct {
    unsigned int attributeIndex; unsigned int attributeValue; float attributeConfidence; char *attributeLabel;
} NvDsInferAttribute;
typedef struct {
    unsigned int numClassesConfigured;
    std::vector<float> perClassPreclusterThreshold;
    std::vector<float> perClassPostclusterThreshold;
} NvDsInferParseDetectionParams;

typedef bool (*NvDsInferParseCustomFunc)(std::vector<NvDsInferLayerInfo> const &outputLayersInfo,
                                         NvDsInferNetworkInfo const &networkInfo,
                                         NvDsInferParseDetectionParams const &detectionParams,
                                         std::vector<NvDsInferObjectDetectionInfo> &objectList);
typedef bool (*NvDsInferClassiferParseCustomFunc)(std::vector<NvDsInferLayerInfo> const &outputLayersInfo,
                                                  NvDsInferNetworkInfo const &networkInfo, float classifierThreshold,
                                                  std::vector<NvDsInferAttribute> &attrList, std::string &descString);
// the documented macros check the function against the typedef at compile time
#define CHECK_CUSTOM_PARSE_FUNC_PROTOTYPE(f) static NvDsInferParseCustomFunc checkFunc_##f __attribute__((unused)) = f
#define CHECK_CUSTOM_CLASSIFIER_PARSE_FUNC_PROTOTYPE(f) \
    static NvDsInferClassiferParseCustomFunc checkFunc_##f __attribute__((unused)) = f
#endif
