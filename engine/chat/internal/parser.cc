#include "engine/chat/internal/parser.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace kvcast {
namespace jinja_internal {
namespace {

constexpr int kMaxDepth = 256;

using ExprPtr = std::unique_ptr<Expr>;

Value IntLiteral(const Token& t) {
  return t.big_int ? Value::Int(*BigInt::FromDigits(t.text, 10)) : Value::Int(t.int_value);
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const ParserHooks& hooks) : tokens_(tokens), hooks_(hooks) {}

  absl::StatusOr<StmtList> ParseTemplate() {
    StmtList body;
    RETURN_IF_ERROR(Subparse({}, &body));
    if (Cur().kind != TokenKind::kEof) return Fail("unexpected tag '" + Cur().text + "'");
    return body;
  }

 private:
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const {
    return tokens_[pos_ + n < tokens_.size() ? pos_ + n : tokens_.size() - 1];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(absl::string_view op) const { return Cur().kind == TokenKind::kOperator && Cur().text == op; }
  bool IsName(absl::string_view name) const { return Cur().kind == TokenKind::kName && Cur().text == name; }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(absl::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kData: return "template data";
      case TokenKind::kVariableBegin: return "'{{'";
      case TokenKind::kVariableEnd: return "end of print statement";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kName: return "'" + t.text + "'";
      case TokenKind::kString: return "string";
      case TokenKind::kInt: return "integer";
      case TokenKind::kFloat: return "float";
      case TokenKind::kOperator: return "'" + t.text + "'";
      case TokenKind::kEof: return "end of template";
    }
    return "token";
  }

  absl::Status Fail(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", Cur().line, ": ", message));
  }
  absl::Status Unexpected(absl::string_view expected) const {
    return Fail(absl::StrCat("expected ", expected, ", got ", Describe(Cur())));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) return Unexpected("end of statement block");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return Unexpected("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }

  ExprPtr NewExpr(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Parses statements until a block tag named in `end_tags` (left as the
  // current token) or the end of the template.
  absl::Status Subparse(const std::vector<std::string>& end_tags, StmtList* body) {
    if (++depth_ > kMaxDepth) return Fail("template nested too deeply");
    while (Cur().kind != TokenKind::kEof) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->text = t.text;
        body->push_back(std::move(s));
        Next();
      } else if (t.kind == TokenKind::kVariableBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = t.line;
        ASSIGN_OR_RETURN(s->expr, ParseTuple(true, {}, false));
        if (Cur().kind != TokenKind::kVariableEnd) return Unexpected("end of print statement");
        Next();
        body->push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        Next();
        if (Cur().kind == TokenKind::kName) {
          for (const std::string& end : end_tags) {
            if (Cur().text == end) {
              --depth_;
              return absl::OkStatus();
            }
          }
        }
        ASSIGN_OR_RETURN(std::unique_ptr<Stmt> s, ParseStatement());
        RETURN_IF_ERROR(ExpectBlockEnd());
        body->push_back(std::move(s));
      } else {
        return Fail("unexpected " + Describe(t));
      }
    }
    if (!end_tags.empty()) {
      return Fail(absl::StrCat("unexpected end of template; looking for the tags '",
                               absl::StrJoin(end_tags, "' or '"), "'"));
    }
    --depth_;
    return absl::OkStatus();
  }

  // Body up to one of `end_tags`; leaves the end tag's name current.
  absl::Status Body(const std::vector<std::string>& end_tags, StmtList* body) {
    RETURN_IF_ERROR(ExpectBlockEnd());
    return Subparse(end_tags, body);
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    if (Cur().kind != TokenKind::kName) return Fail("tag name expected");
    std::string tag = Cur().text;
    auto s = std::make_unique<Stmt>();
    s->line = Cur().line;
    Next();
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, {}, false, /*with_condexpr=*/false));
        StmtList branch;
        RETURN_IF_ERROR(Body({"elif", "else", "endif"}, &branch));
        s->branches.emplace_back(std::move(cond), std::move(branch));
        std::string which = Cur().text;
        Next();
        if (which == "elif") continue;
        if (which == "else") {
          StmtList else_branch;
          RETURN_IF_ERROR(Body({"endif"}, &else_branch));
          s->branches.emplace_back(nullptr, std::move(else_branch));
          Next();
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      ASSIGN_OR_RETURN(s->target, ParseAssignTarget(false, {"in"}));
      if (!SkipName("in")) return Unexpected("'in'");
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, {"recursive"}, false, /*with_condexpr=*/false));
      if (SkipName("if")) {
        ASSIGN_OR_RETURN(s->condition, ParseExpression());
      }
      if (IsName("recursive")) return Fail("recursive for loops are not supported");
      ++loop_depth_;
      RETURN_IF_ERROR(Body({"endfor", "else"}, &s->body));
      --loop_depth_;
      if (Cur().text == "else") {
        Next();
        RETURN_IF_ERROR(Body({"endfor"}, &s->else_body));
      }
      Next();
    } else if (tag == "set") {
      ASSIGN_OR_RETURN(s->target, ParseAssignTarget(true, {}));
      if (SkipOp("=")) {
        s->kind = StmtKind::kSet;
        ASSIGN_OR_RETURN(s->expr, ParseTuple(false, {}, false));
      } else {
        s->kind = StmtKind::kSetBlock;
        if (IsOp("|")) {
          ASSIGN_OR_RETURN(s->expr, ParseFilterChain(NewExpr(ExprKind::kBlockValue, s->line)));
        }
        RETURN_IF_ERROR(Body({"endset"}, &s->body));
        Next();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      ASSIGN_OR_RETURN(s->name, ExpectName());
      RETURN_IF_ERROR(ParseSignature(&s->params));
      int saved = loop_depth_;
      loop_depth_ = 0;
      RETURN_IF_ERROR(Body({"endmacro"}, &s->body));
      loop_depth_ = saved;
      Next();
    } else if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (IsOp("(")) RETURN_IF_ERROR(ParseSignature(&s->params));
      ASSIGN_OR_RETURN(s->expr, ParseExpression());
      if (s->expr->kind != ExprKind::kCall) return Fail("expected call");
      int saved = loop_depth_;
      loop_depth_ = 0;
      RETURN_IF_ERROR(Body({"endcall"}, &s->body));
      loop_depth_ = saved;
      Next();
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      ASSIGN_OR_RETURN(s->expr, ParseFilterChain(NewExpr(ExprKind::kBlockValue, s->line), /*first=*/true));
      RETURN_IF_ERROR(Body({"endfilter"}, &s->body));
      Next();
    } else if (tag == "with") {
      s->kind = StmtKind::kWith;
      while (Cur().kind != TokenKind::kBlockEnd) {
        if (!s->with_targets.empty()) RETURN_IF_ERROR(ExpectOp(","));
        ASSIGN_OR_RETURN(Target t, ParseAssignTarget(false, {}));
        RETURN_IF_ERROR(ExpectOp("="));
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        s->with_targets.push_back(std::move(t));
        s->with_values.push_back(std::move(v));
      }
      RETURN_IF_ERROR(Body({"endwith"}, &s->body));
      Next();
    } else if (tag == "print") {
      s->kind = StmtKind::kPrint;
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, {}, false));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return Fail(absl::StrCat("'", tag, "' outside of a loop"));
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (tag == "generation") {
      s->kind = StmtKind::kGeneration;
      RETURN_IF_ERROR(Body({"endgeneration"}, &s->body));
      Next();
    } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
               tag == "autoescape") {
      pos_ -= 1;
      return Fail(absl::StrCat("the '", tag, "' tag is not supported in chat templates"));
    } else {
      pos_ -= 1;
      return Fail(absl::StrCat("encountered unknown tag '", tag, "'"));
    }
    return s;
  }

  absl::Status ParseSignature(MacroParams* params) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->names.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      params->names.push_back(name);
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(ExprPtr d, ParseExpression());
        params->defaults.push_back(std::move(d));
      } else if (!params->defaults.empty()) {
        return Fail("non-default argument follows default argument");
      }
    }
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<Target> ParseAssignTarget(bool with_namespace, const std::vector<std::string>& extra_end) {
    Target t;
    if (with_namespace && Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
        Peek().text == ".") {
      t.kind = Target::Kind::kNamespaceAttr;
      t.name = Cur().text;
      Next();
      Next();
      ASSIGN_OR_RETURN(t.attr, ExpectName());
      return t;
    }
    // A name or a tuple of names, with or without parentheses.
    bool parens = SkipOp("(");
    std::vector<Target> items;
    bool is_tuple = parens;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        is_tuple = true;
      }
      if (Cur().kind != TokenKind::kName) {
        if (!items.empty() && is_tuple) break;  // Trailing comma.
        return Unexpected("a name to assign to");
      }
      bool end = false;
      for (const auto& e : extra_end) end |= Cur().text == e;
      if (end && !items.empty()) break;
      const std::string& n = Cur().text;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None") {
        return Fail(absl::StrCat("can't assign to '", n, "'"));
      }
      Target item;
      item.name = n;
      items.push_back(std::move(item));
      Next();
    }
    if (parens) RETURN_IF_ERROR(ExpectOp(")"));
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    t.kind = Target::Kind::kTuple;
    t.items = std::move(items);
    return t;
  }

  bool IsTupleEnd(const std::vector<std::string>& extra_end) const {
    const Token& t = Cur();
    if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEof) {
      return true;
    }
    if (t.kind == TokenKind::kOperator && t.text == ")") return true;
    if (t.kind == TokenKind::kName) {
      for (const auto& e : extra_end) {
        if (t.text == e) return true;
      }
    }
    return false;
  }

  absl::StatusOr<ExprPtr> ParseTuple(bool /*unused*/, const std::vector<std::string>& extra_end,
                                     bool explicit_parentheses, bool with_condexpr = true) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      if (with_condexpr) {
        ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
        items.push_back(std::move(e));
      } else {
        ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
        items.push_back(std::move(e));
      }
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) return Fail("expected an expression, got " + Describe(Cur()));
    }
    ExprPtr t = NewExpr(ExprKind::kTuple, line);
    t->args = std::move(items);
    return t;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
    auto r = ParseCondExpr();
    --depth_;
    return r;
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (SkipName("if")) {
      ExprPtr c = NewExpr(ExprKind::kCondExpr, line);
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr else_expr;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(else_expr, ParseCondExpr());
      }
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(else_expr));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr Binary(ExprKind kind, std::string op, ExprPtr a, ExprPtr b, int line) {
    ExprPtr e = NewExpr(kind, line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = Binary(ExprKind::kOr, "or", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = Binary(ExprKind::kAnd, "and", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      int line = Cur().line;
      Next();
      if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      --depth_;
      ExprPtr e = NewExpr(ExprKind::kNot, line);
      e->args.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == TokenKind::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(operand));
    }
    if (cmp) return cmp;
    return first;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      std::string op = Cur().text;
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = Binary(ExprKind::kBinary, op, std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = Binary(ExprKind::kBinary, "~", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Cur().text;
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = Binary(ExprKind::kBinary, op, std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = Binary(ExprKind::kBinary, "**", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
    int line = Cur().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      ExprKind kind = IsOp("-") ? ExprKind::kNeg : ExprKind::kPos;
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = NewExpr(kind, line);
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    --depth_;
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    int line = t.line;
    if (t.kind == TokenKind::kName) {
      ExprPtr e;
      if (t.text == "true" || t.text == "True") {
        e = NewExpr(ExprKind::kLiteral, line);
        e->literal = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        e = NewExpr(ExprKind::kLiteral, line);
        e->literal = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        e = NewExpr(ExprKind::kLiteral, line);
        e->literal = Value::None();
      } else {
        e = NewExpr(ExprKind::kName, line);
        e->name = t.text;
      }
      Next();
      return e;
    }
    if (t.kind == TokenKind::kString) {
      std::string s;
      while (Cur().kind == TokenKind::kString) {
        s += Cur().text;
        Next();
      }
      ExprPtr e = NewExpr(ExprKind::kLiteral, line);
      e->literal = Value::String(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) {
      ExprPtr e = NewExpr(ExprKind::kLiteral, line);
      e->literal = t.kind == TokenKind::kFloat ? Value::Float(t.float_value) : IntLiteral(t);
      Next();
      return e;
    }
    if (IsOp("(")) {
      Next();
      ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, {}, true));
      RETURN_IF_ERROR(ExpectOp(")"));
      return e;
    }
    if (IsOp("[")) {
      Next();
      ExprPtr e = NewExpr(ExprKind::kList, line);
      while (!IsOp("]")) {
        if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
        ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
        e->args.push_back(std::move(item));
      }
      Next();
      return e;
    }
    if (IsOp("{")) {
      Next();
      ExprPtr e = NewExpr(ExprKind::kDict, line);
      while (!IsOp("}")) {
        if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
        ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
        RETURN_IF_ERROR(ExpectOp(":"));
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->args.push_back(std::move(key));
        e->args.push_back(std::move(value));
      }
      Next();
      return e;
    }
    return Fail("unexpected " + Describe(t));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      int line = Cur().line;
      if (IsOp(".")) {
        Next();
        if (Cur().kind == TokenKind::kName) {
          ExprPtr e = NewExpr(ExprKind::kGetAttr, line);
          e->name = Cur().text;
          e->args.push_back(std::move(node));
          node = std::move(e);
          Next();
        } else if (Cur().kind == TokenKind::kInt) {
          ExprPtr e = NewExpr(ExprKind::kGetItem, line);
          e->args.push_back(std::move(node));
          ExprPtr index = NewExpr(ExprKind::kLiteral, line);
          index->literal = IntLiteral(Cur());
          e->args.push_back(std::move(index));
          node = std::move(e);
          Next();
        } else {
          return Unexpected("a name or number after '.'");
        }
      } else if (IsOp("[")) {
        Next();
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        ExprPtr call = NewExpr(ExprKind::kCall, line);
        call->args.push_back(std::move(node));
        RETURN_IF_ERROR(ParseCallArgs(call.get()));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line) {
    std::vector<ExprPtr> subs;
    bool any_slice = false;
    while (!IsOp("]")) {
      if (!subs.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      ExprPtr start, stop, step;
      if (!IsOp(":")) {
        ASSIGN_OR_RETURN(start, ParseExpression());
        if (!IsOp(":")) {
          subs.push_back(std::move(start));
          continue;
        }
      }
      Next();  // ':'
      if (!IsOp("]") && !IsOp(",") && !IsOp(":")) {
        ASSIGN_OR_RETURN(stop, ParseExpression());
      }
      if (SkipOp(":")) {
        if (!IsOp("]") && !IsOp(",")) {
          ASSIGN_OR_RETURN(step, ParseExpression());
        }
      }
      ExprPtr slice = NewExpr(ExprKind::kSlice, line);
      slice->args.push_back(nullptr);
      slice->args.push_back(std::move(start));
      slice->args.push_back(std::move(stop));
      slice->args.push_back(std::move(step));
      subs.push_back(std::move(slice));
      any_slice = true;
    }
    Next();  // ']'
    if (subs.empty()) return Fail("expected a subscript");
    if (subs.size() == 1 && subs[0]->kind == ExprKind::kSlice) {
      subs[0]->args[0] = std::move(node);
      return std::move(subs[0]);
    }
    if (any_slice) return Fail("tuples of slices are not supported");
    ExprPtr e = NewExpr(ExprKind::kGetItem, line);
    e->args.push_back(std::move(node));
    if (subs.size() == 1) {
      e->args.push_back(std::move(subs[0]));
    } else {
      ExprPtr t = NewExpr(ExprKind::kTuple, line);
      t->args = std::move(subs);
      e->args.push_back(std::move(t));
    }
    return e;
  }

  // Parses "(args, name=value)" into e->args (after any already there) and
  // e->kwargs.
  absl::Status ParseCallArgs(Expr* e) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Fail("*args and **kwargs in calls are not supported");
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator && Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        e->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e->kwargs.empty()) return Fail("positional argument follows keyword argument");
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        e->args.push_back(std::move(v));
      }
    }
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node) {
    int line = Cur().line;
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    if (!hooks_.is_filter(name)) return Fail(absl::StrCat("no filter named '", name, "'"));
    ExprPtr f = NewExpr(ExprKind::kFilter, line);
    f->name = name;
    f->args.push_back(std::move(node));
    if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(f.get()));
    return f;
  }

  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr node, bool first = false) {
    if (first) {
      ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    }
    while (SkipOp("|")) {
      ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (SkipOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        int line = Cur().line;
        Next();
        bool negated = SkipName("not");
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (!hooks_.is_test(name)) return Fail(absl::StrCat("no test named '", name, "'"));
        ExprPtr t = NewExpr(ExprKind::kTest, line);
        t->name = name;
        t->negated = negated;
        t->args.push_back(std::move(node));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(t.get()));
        } else if ((Cur().kind == TokenKind::kName || Cur().kind == TokenKind::kString ||
                    Cur().kind == TokenKind::kInt || Cur().kind == TokenKind::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) return Fail("you cannot chain multiple tests with is");
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->args.push_back(std::move(arg));
        }
        node = std::move(t);
      } else if (IsOp("(")) {
        ExprPtr call = NewExpr(ExprKind::kCall, Cur().line);
        call->args.push_back(std::move(node));
        RETURN_IF_ERROR(ParseCallArgs(call.get()));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& tokens_;
  const ParserHooks& hooks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<StmtList> ParseTokens(const std::vector<Token>& tokens, const ParserHooks& hooks) {
  return Parser(tokens, hooks).ParseTemplate();
}

}  // namespace jinja_internal
}  // namespace kvcast
